//! Round-to-nearest group quantization, the grid every group-wise method shares:
//! asymmetric `bits`-bit codes with an integer zero point (range widened to include 0, as
//! AutoAWQ and GPTQ do), or symmetric 8-bit codes around a zero of 128.

use half::f16;

use super::GroupQuant;

/// The quantization grid of one group: `w ≈ scale * (code - zero)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grid {
    pub scale: f32,
    pub zero: u8,
    pub max_code: u8,
}

impl Grid {
    /// Asymmetric grid over `[min(values, 0), max(values, 0)]` with `2^bits` levels. The scale
    /// is rounded to `f16` first (the stored precision), so codes match what is stored.
    pub fn asymmetric(values: &[f32], bits: u8) -> Grid {
        let max_code = ((1u32 << bits) - 1) as u8;
        let (lo, hi) = values
            .iter()
            .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let raw = (hi - lo) / max_code as f32;
        let scale = if raw > 0.0 {
            f16::from_f32(raw).to_f32().max(f32::MIN_POSITIVE)
        } else {
            1.0
        };
        let zero = (-lo / scale).round().clamp(0.0, max_code as f32) as u8;
        Grid {
            scale,
            zero,
            max_code,
        }
    }

    /// Symmetric 8-bit grid: `scale = absmax / 127`, codes `128 ± 127`.
    pub fn symmetric8(values: &[f32]) -> Grid {
        let amax = values.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if amax > 0.0 { amax / 127.0 } else { 1.0 };
        Grid {
            scale,
            zero: 128,
            max_code: 255,
        }
    }

    /// The code of `v`.
    pub fn code(&self, v: f32) -> u8 {
        let lo = if self.zero == 128 && self.max_code == 255 {
            1.0
        } else {
            0.0
        };
        ((v / self.scale).round() + self.zero as f32).clamp(lo, self.max_code as f32) as u8
    }

    /// The value of code `q`.
    pub fn value(&self, q: u8) -> f32 {
        self.scale * (q as f32 - self.zero as f32)
    }

    /// `v` rounded to the grid.
    pub fn round(&self, v: f32) -> f32 {
        self.value(self.code(v))
    }
}

/// How a group's grid is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridKind {
    /// Asymmetric with this many bits.
    Asymmetric(u8),
    /// Symmetric 8-bit.
    Symmetric8,
}

impl GridKind {
    pub fn fit(self, values: &[f32]) -> Grid {
        match self {
            GridKind::Asymmetric(bits) => Grid::asymmetric(values, bits),
            GridKind::Symmetric8 => Grid::symmetric8(values),
        }
    }

    pub fn bits(self) -> u8 {
        match self {
            GridKind::Asymmetric(b) => b,
            GridKind::Symmetric8 => 8,
        }
    }
}

/// Quantize a row-major `[rows, cols]` matrix group by group (`group` columns each).
pub fn quantize_rtn(
    w: &[f32],
    rows: usize,
    cols: usize,
    group: usize,
    kind: GridKind,
) -> GroupQuant {
    let groups = cols / group;
    let mut q = GroupQuant {
        rows,
        cols,
        bits: kind.bits(),
        group_size: group,
        codes: vec![0; rows * cols],
        scales: Vec::with_capacity(rows * groups),
        zeros: Vec::with_capacity(rows * groups),
        perm: None,
    };
    for (r, row) in w.chunks_exact(cols).enumerate() {
        for (g, vals) in row.chunks_exact(group).enumerate() {
            let grid = kind.fit(vals);
            q.scales.push(grid.scale);
            q.zeros.push(grid.zero);
            let start = r * cols + g * group;
            for (c, v) in q.codes[start..start + group].iter_mut().zip(vals) {
                *c = grid.code(*v);
            }
        }
    }
    q
}

/// `w` with every group rounded to its RTN grid (AWQ's search objective).
pub fn fake_quantize(w: &[f32], cols: usize, group: usize, kind: GridKind, out: &mut [f32]) {
    for (src, dst) in w.chunks_exact(group).zip(out.chunks_exact_mut(group)) {
        let grid = kind.fit(src);
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = grid.round(*s));
    }
    debug_assert_eq!(w.len() % cols, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asymmetric_grid_error_is_at_most_one_step() {
        // Half a step from rounding, plus up to half a step where the rounded integer zero
        // pushes an extreme value past the last code.
        let vals: Vec<f32> = (0..128)
            .map(|i| ((i * 37 % 97) as f32 - 30.0) / 50.0)
            .collect();
        let g = Grid::asymmetric(&vals, 4);
        for v in &vals {
            assert!((g.round(*v) - v).abs() <= g.scale + 1e-6, "{v}");
        }
        assert!(g.zero <= 15);
    }

    #[test]
    fn all_positive_group_keeps_zero_representable() {
        let g = Grid::asymmetric(&[1.0, 2.0, 3.0], 4);
        assert_eq!(g.zero, 0);
        assert_eq!(g.round(0.0), 0.0);
    }

    #[test]
    fn symmetric_codes_stay_in_range() {
        let g = Grid::symmetric8(&[-2.0, 1.0, 0.5]);
        assert_eq!(g.code(-2.0), 1);
        assert_eq!(g.code(2.0), 255);
        assert!((g.round(0.5) - 0.5).abs() <= g.scale / 2.0);
    }

    #[test]
    fn rtn_dequantizes_close() {
        let w: Vec<f32> = (0..4 * 64)
            .map(|i| ((i * 29 % 61) as f32 - 30.0) / 40.0)
            .collect();
        let q = quantize_rtn(&w, 4, 64, 32, GridKind::Asymmetric(4));
        let d = q.dequantize();
        for (i, (a, b)) in w.iter().zip(&d).enumerate() {
            let s = q.scales[i / 32];
            assert!((a - b).abs() <= s + 1e-6, "{i}: {a} vs {b}");
        }
    }
}
