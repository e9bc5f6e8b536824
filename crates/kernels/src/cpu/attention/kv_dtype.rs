//! [`KvDtype`]: how the paged KV cache stores one head row (`head_dim` values of one token and
//! one kv head), and the scalar encode/decode that define each format (the spec the SIMD
//! loaders must reproduce bit for bit).
//!
//! ```text
//!   f32:  [ x0 x1 ... x(hd-1) ]            4·hd bytes, native-endian f32
//!   f16:  [ h0 h1 ... h(hd-1) ]            2·hd bytes, native-endian IEEE half
//!   q8:   [ scale | q0 q1 ... q(hd-1) ]    4 + hd bytes: f32 scale, then i8 values
//!         scale = max|x| / 127,  q = round(x / scale),  decoded x' = q · scale
//! ```
//!
//! Rows are stored back to back, so a row's byte offset is its row index × [`KvDtype::row_bytes`].

use std::fmt;
use std::str::FromStr;

use half::f16;

/// Storage type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvDtype {
    /// 32-bit floats: exact.
    #[default]
    F32,
    /// IEEE half precision (round to nearest even; about 3 significant digits).
    F16,
    /// int8 with one f32 scale per head row (`max|x| / 127`).
    Q8,
}

/// A `--kv-cache-dtype` value that is not one of [`KvDtype::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown KV cache dtype {given:?}; valid values: f32, f16, q8")]
pub struct ParseKvDtypeError {
    /// The rejected text.
    pub given: String,
}

impl KvDtype {
    /// Every dtype, in the order of [`KvDtype::NAMES`].
    pub const ALL: [KvDtype; 3] = [KvDtype::F32, KvDtype::F16, KvDtype::Q8];
    /// The accepted spellings, as [`FromStr`] parses and [`fmt::Display`] prints them.
    pub const NAMES: [&'static str; 3] = ["f32", "f16", "q8"];

    /// The lower-case name (`f32`, `f16`, `q8`).
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
            KvDtype::Q8 => "q8",
        }
    }

    /// Bytes of one stored head row of `head_dim` values.
    pub fn row_bytes(self, head_dim: usize) -> usize {
        match self {
            KvDtype::F32 => 4 * head_dim,
            KvDtype::F16 => 2 * head_dim,
            KvDtype::Q8 => Q8_SCALE_BYTES + head_dim,
        }
    }

    /// Stores `src` (one head row) into `dst` (`row_bytes(src.len())` bytes).
    pub fn encode_row(self, src: &[f32], dst: &mut [u8]) {
        assert_eq!(dst.len(), self.row_bytes(src.len()), "encode_row: dst size");
        match self {
            KvDtype::F32 => {
                for (d, x) in dst.chunks_exact_mut(4).zip(src) {
                    d.copy_from_slice(&x.to_ne_bytes());
                }
            }
            KvDtype::F16 => {
                for (d, x) in dst.chunks_exact_mut(2).zip(src) {
                    d.copy_from_slice(&f16::from_f32(*x).to_bits().to_ne_bytes());
                }
            }
            KvDtype::Q8 => encode_q8(src, dst),
        }
    }

    /// Reads one stored head row `src` back into `dst` (`head_dim` floats).
    pub fn decode_row(self, src: &[u8], dst: &mut [f32]) {
        assert_eq!(src.len(), self.row_bytes(dst.len()), "decode_row: src size");
        match self {
            KvDtype::F32 => {
                for (x, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *x = f32::from_ne_bytes([s[0], s[1], s[2], s[3]]);
                }
            }
            KvDtype::F16 => {
                for (x, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *x = f16::from_bits(u16::from_ne_bytes([s[0], s[1]])).to_f32();
                }
            }
            KvDtype::Q8 => {
                let (scale, q) = split_q8(src);
                for (x, &b) in dst.iter_mut().zip(q) {
                    *x = (b as i8) as f32 * scale;
                }
            }
        }
    }
}

/// Bytes of the f32 scale that opens a q8 row.
pub(crate) const Q8_SCALE_BYTES: usize = 4;

/// A q8 row's scale and its `head_dim` int8 values (as bytes).
#[inline]
fn split_q8(row: &[u8]) -> (f32, &[u8]) {
    let (s, q) = row.split_at(Q8_SCALE_BYTES);
    (f32::from_ne_bytes([s[0], s[1], s[2], s[3]]), q)
}

fn encode_q8(src: &[f32], dst: &mut [u8]) {
    let amax = src.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = amax / 127.0;
    let (s, q) = dst.split_at_mut(Q8_SCALE_BYTES);
    s.copy_from_slice(&scale.to_ne_bytes());
    for (b, &x) in q.iter_mut().zip(src) {
        let v = if scale > 0.0 {
            (x / scale).round().clamp(-127.0, 127.0)
        } else {
            0.0
        };
        *b = (v as i8) as u8;
    }
}

impl fmt::Display for KvDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KvDtype {
    type Err = ParseKvDtypeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KvDtype::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseKvDtypeError {
                given: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_list_valid_values() {
        for (d, n) in KvDtype::ALL.into_iter().zip(KvDtype::NAMES) {
            assert_eq!(d.to_string(), n);
            assert_eq!(n.parse::<KvDtype>(), Ok(d));
        }
        assert_eq!("F16".parse::<KvDtype>(), Ok(KvDtype::F16));
        let err = "int4".parse::<KvDtype>().unwrap_err().to_string();
        assert!(
            err.contains("\"int4\"") && err.contains("f32, f16, q8"),
            "{err}"
        );
        assert_eq!(KvDtype::default(), KvDtype::F32);
    }

    #[test]
    fn row_bytes_per_dtype() {
        assert_eq!(KvDtype::F32.row_bytes(64), 256);
        assert_eq!(KvDtype::F16.row_bytes(64), 128);
        assert_eq!(KvDtype::Q8.row_bytes(64), 68);
    }

    fn round_trip(d: KvDtype, x: &[f32]) -> Vec<f32> {
        let mut bytes = vec![0u8; d.row_bytes(x.len())];
        d.encode_row(x, &mut bytes);
        let mut y = vec![f32::NAN; x.len()];
        d.decode_row(&bytes, &mut y);
        y
    }

    #[test]
    fn f32_and_f16_round_trips() {
        let x = [1.0, -0.5, 3.25e-3, 1234.5, -0.0, 7.1];
        assert_eq!(round_trip(KvDtype::F32, &x), x);
        for (a, b) in x.iter().zip(round_trip(KvDtype::F16, &x)) {
            assert!((a - b).abs() <= a.abs() * 2f32.powi(-11), "{a} -> {b}");
        }
        assert_eq!(
            round_trip(KvDtype::F16, &[0.5, -2.0, 1024.0]),
            [0.5, -2.0, 1024.0]
        );
    }

    #[test]
    fn q8_error_is_at_most_half_a_step() {
        let x: Vec<f32> = (0..80)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.031)
            .collect();
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let y = round_trip(KvDtype::Q8, &x);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= scale * 0.5 * (1.0 + 1e-5), "{a} -> {b}");
        }
        let i = x
            .iter()
            .position(|v| v.abs() == amax)
            .expect("max is in the row");
        assert!(
            (y[i] - x[i]).abs() <= amax * 1e-6,
            "the largest value is kept"
        );
        assert_eq!(round_trip(KvDtype::Q8, &[0.0; 5]), [0.0; 5]);
    }
}
