//! [`DType::NF4`] and [`DType::NF4_DQ`]: bitsandbytes' NormalFloat-4 (QLoRA), blocks of 64
//! weights as 4-bit indices into a fixed table of 16 values in `[-1, 1]` ([`NF4_TABLE`]),
//! scaled by the block's absolute maximum. Multiplied with [`ActFormat::Q8_0`] activations.
//!
//! ```text
//! NF4 block (36 bytes, 4.5 bits per weight)
//! +--------------+----------------------+----------------------+
//! | absmax: f32  | sub-block 0 (16 B)   | sub-block 1 (16 B)   |
//! +--------------+----------------------+----------------------+
//! sub-block s: byte j = q[32 s + j] | q[32 s + j + 16] << 4     (as Q4_0 packs a block)
//! w = NF4_TABLE[q] * absmax
//!
//! NF4_DQ row of n weights: 8-byte header, then n / 64 blocks of 33 bytes
//! +--------+-------------+-----------+-------------------------+-----------+----
//! | c: f32 | offset: f32 | code: u8  | 32 bytes of nibbles     | code: u8  | ...
//! +--------+-------------+-----------+-------------------------+-----------+----
//! absmax = dynamic_map()[code] * c + offset
//! ```
//!
//! `NF4_DQ` is bitsandbytes' double quantization (`compress_statistics`): the per-block
//! absmaxes are quantized to 8 bits with the signed dynamic map ([`dynamic_map`], bitsandbytes'
//! `create_dynamic_map(signed=True)`) after subtracting their mean (`offset`) and dividing by
//! `c = max |absmax - offset|`. **Difference from bitsandbytes:** bitsandbytes groups 256
//! consecutive absmaxes of the flattened tensor and keeps one `f32` per group; Kestrel groups
//! the absmaxes of one row, so every row is self-contained (a row's bytes never depend on
//! another row). The 4-bit codes are chosen against the *dequantized* absmax, so the stored
//! codes and the scale they are multiplied with agree.
//!
//! Kernels: the dot product maps each code to `NF4_I8[q] = round(127 NF4_TABLE[q])` (a byte
//! shuffle), takes the integer dot product with the Q8_0 quants and scales it by
//! `absmax / 127 * d_a` per 32 elements. **The kernels (and `vec_dot_ref`) multiply with the
//! table rounded to 1/127** (at most `0.5 / 127` per entry, relative to absmax); `dequantize`
//! uses the exact `f32` table.

use std::sync::OnceLock;

use bytemuck::{Pod, Zeroable};

use super::dispatch::{select_variant, Variant};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// Weights per block.
pub const QK: usize = 64;
/// Bytes of one Q8_0 activation block (32 values).
const A: usize = 34;

/// bitsandbytes' NF4 table (the `float` constants of its CUDA and CPU kernels).
// The digits are kept exactly as the reference publishes them.
#[allow(clippy::excessive_precision)]
pub const NF4_TABLE: [f32; 16] = [
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
];

/// `round(127 * NF4_TABLE[q])`: the table the dot-product kernels multiply with.
pub const NF4_I8: [i8; 16] = [
    -127, -88, -67, -50, -36, -23, -12, 0, 10, 20, 31, 43, 56, 71, 92, 127,
];

/// One NF4 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockNf4 {
    /// Absolute maximum of the block's weights.
    pub absmax: f32,
    /// Packed codes of the two 32-element sub-blocks (see the module docs).
    pub qs: [u8; QK / 2],
}

/// One NF4_DQ block: the absmax as an index into [`dynamic_map`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockNf4Dq {
    /// Index of the absmax into the dynamic map (see the module docs).
    pub code: u8,
    /// Packed codes, as in [`BlockNf4`].
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockNf4>() == 36 && DType::NF4.block_bytes() == 36);
const _: () = assert!(std::mem::size_of::<BlockNf4Dq>() == 33);
const _: () = assert!(DType::NF4_DQ.block_bytes() == 33 && DType::NF4_DQ.row_header_bytes() == 8);

/// bitsandbytes' signed 8-bit dynamic map (`create_dynamic_map(signed=True,
/// max_exponent_bits=7, total_bits=8)`), sorted ascending, rebuilt from its definition in
/// `f32` as bitsandbytes computes it: for `i` in 0..7, the `2^i` midpoints of
/// `linspace(0.1, 1, 2^i + 1)` times `±10^(i - 6)`, then 0 and 1.
pub fn dynamic_map() -> &'static [f32; 256] {
    static MAP: OnceLock<[f32; 256]> = OnceLock::new();
    MAP.get_or_init(build_dynamic_map)
}

/// `torch.linspace(start, end, steps)` in `f32` as torch's CPU kernel computes it: the first
/// half `start + step * i`, the second half `end - step * (steps - 1 - i)`, each a fused
/// multiply-add (plain multiply-then-add differs in the last bit for a third of the map).
fn linspace(start: f32, end: f32, steps: usize) -> Vec<f32> {
    let step = (end - start) / (steps - 1) as f32;
    (0..steps)
        .map(|i| {
            if i < steps / 2 {
                step.mul_add(i as f32, start)
            } else {
                (-step).mul_add((steps - 1 - i) as f32, end)
            }
        })
        .collect()
}

fn build_dynamic_map() -> [f32; 256] {
    let mut data = Vec::with_capacity(256);
    for i in 0..7 {
        let b = linspace(0.1, 1.0, (1 << i) + 1);
        let scale = 10f64.powi(i - 6) as f32;
        for w in b.windows(2) {
            let mean = (w[0] + w[1]) / 2.0;
            data.push(scale * mean);
            data.push(-scale * mean);
        }
    }
    data.push(0.0);
    data.push(1.0);
    data.sort_by(f32::total_cmp);
    let mut map = [0.0; 256];
    map.copy_from_slice(&data);
    map
}

/// Index of the entry of `sorted` nearest to `v` (the lower one on a tie).
fn nearest(sorted: &[f32], v: f32) -> usize {
    let i = sorted.partition_point(|&e| e < v);
    if i == 0 {
        0
    } else if i == sorted.len() || v - sorted[i - 1] <= sorted[i] - v {
        i - 1
    } else {
        i
    }
}

/// NF4 codes of `x` against the scale `absmax` (code 7, the table's 0, when it is 0), packed
/// into the 32 bytes of `qs`.
pub fn encode_codes(x: &[f32], absmax: f32, qs: &mut [u8; QK / 2]) {
    assert_eq!(x.len(), QK, "NF4: a block has {QK} values");
    let id = if absmax != 0.0 { 1.0 / absmax } else { 0.0 };
    let q: Vec<u8> = x
        .iter()
        .map(|&v| nearest(&NF4_TABLE, v * id) as u8)
        .collect();
    for s in 0..2 {
        for j in 0..16 {
            qs[16 * s + j] = q[32 * s + j] | q[32 * s + j + 16] << 4;
        }
    }
}

fn block_absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// Reference NF4 quantization (bitsandbytes' `quantize_4bit(quant_type="nf4",
/// blocksize=64)`): per block `absmax = max |x|`, code = nearest table entry to `x / absmax`.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockNf4> {
    assert!(
        x.len().is_multiple_of(QK),
        "NF4: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK)
        .map(|b| {
            let absmax = block_absmax(b);
            let mut qs = [0; QK / 2];
            encode_codes(b, absmax, &mut qs);
            BlockNf4 { absmax, qs }
        })
        .collect()
}

/// The absmax an NF4_DQ row stores for `code`: `dynamic_map()[code] * c + offset`.
pub fn dq_absmax(code: u8, c: f32, offset: f32) -> f32 {
    dynamic_map()[code as usize] * c + offset
}

/// Reference NF4_DQ row quantizer: writes the `8 + 33 n / 64` bytes of `x`'s row to `out`
/// (see the module docs for the double quantization).
pub fn quantize_row_ref(x: &[f32], out: &mut [u8]) {
    let n = x.len();
    assert!(
        n.is_multiple_of(QK),
        "NF4_DQ: length {n} is not a multiple of {QK}"
    );
    let bytes = DType::NF4_DQ.row_bytes(n).unwrap_or(usize::MAX);
    assert!(out.len() >= bytes, "NF4_DQ: output buffer too short");
    let absmax: Vec<f32> = x.chunks_exact(QK).map(block_absmax).collect();
    let offset = absmax.iter().sum::<f32>() / absmax.len().max(1) as f32;
    let c = absmax.iter().fold(0.0f32, |m, a| m.max((a - offset).abs()));
    let c = if c > 0.0 { c } else { 1.0 };
    out[..4].copy_from_slice(&c.to_le_bytes());
    out[4..8].copy_from_slice(&offset.to_le_bytes());
    for ((b, am), blk) in x
        .chunks_exact(QK)
        .zip(&absmax)
        .zip(out[8..bytes].chunks_exact_mut(33))
    {
        let code = nearest(dynamic_map(), (am - offset) / c) as u8;
        let mut qs = [0; QK / 2];
        encode_codes(b, dq_absmax(code, c, offset), &mut qs);
        blk[0] = code;
        blk[1..].copy_from_slice(&qs);
    }
}

/// A row of either layout, seen block by block.
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    /// Row header bytes (0 or 8).
    pub hdr: usize,
    /// Block bytes (36 or 33).
    pub bb: usize,
    /// Offset of the nibbles in a block (4 or 1).
    pub qoff: usize,
    dq: bool,
}

impl Layout {
    pub(crate) const fn of(dq: bool) -> Layout {
        if dq {
            Layout {
                hdr: 8,
                bb: 33,
                qoff: 1,
                dq,
            }
        } else {
            Layout {
                hdr: 0,
                bb: 36,
                qoff: 4,
                dq,
            }
        }
    }

    /// The absmax of every block of the first `nb` blocks of `row`.
    pub(crate) fn absmaxes(self, row: &[u8], nb: usize) -> Vec<f32> {
        let f = |o: usize| f32::from_le_bytes([row[o], row[o + 1], row[o + 2], row[o + 3]]);
        (0..nb)
            .map(|b| {
                let blk = self.hdr + b * self.bb;
                if self.dq {
                    dq_absmax(row[blk], f(0), f(4))
                } else {
                    f(blk)
                }
            })
            .collect()
    }

    /// Checks a dot product's arguments; returns the block count.
    pub(crate) fn check_dot(self, n: usize, w: &[u8], a: &[u8]) -> usize {
        assert!(
            n.is_multiple_of(QK),
            "vec_dot: n = {n} is not a multiple of {QK}"
        );
        let nb = n / QK;
        assert!(
            w.len() >= self.hdr + nb * self.bb,
            "vec_dot: weight row shorter than n"
        );
        assert!(
            a.len() >= nb * 2 * A,
            "vec_dot: activation row shorter than n"
        );
        nb
    }
}

/// Code `j` (0..64) of a block's 32 nibble bytes.
fn code(qs: &[u8], j: usize) -> u8 {
    let (s, k) = (j / 32, j % 32);
    if k < 16 {
        qs[16 * s + k] & 0x0F
    } else {
        qs[16 * s + k - 16] >> 4
    }
}

fn dequantize_with(l: Layout, src: &[u8], dst: &mut [f32]) {
    assert!(
        dst.len().is_multiple_of(QK),
        "NF4 dequantize: length is not a multiple of {QK}"
    );
    let nb = dst.len() / QK;
    assert!(
        src.len() >= l.hdr + nb * l.bb,
        "NF4 dequantize: too few blocks"
    );
    for (b, (am, o)) in l
        .absmaxes(src, nb)
        .into_iter()
        .zip(dst.chunks_exact_mut(QK))
        .enumerate()
    {
        let qs = &src[l.hdr + b * l.bb + l.qoff..][..QK / 2];
        for (j, y) in o.iter_mut().enumerate() {
            *y = NF4_TABLE[code(qs, j) as usize] * am;
        }
    }
}

/// Reference NF4 dequantization: `w = NF4_TABLE[q] * absmax` (exact table).
pub fn dequantize_ref(src: &[u8], dst: &mut [f32]) {
    dequantize_with(Layout::of(false), src, dst)
}

/// Reference NF4_DQ dequantization: as [`dequantize_ref`] with the row's decoded absmaxes.
pub fn dequantize_dq_ref(src: &[u8], dst: &mut [f32]) {
    dequantize_with(Layout::of(true), src, dst)
}

fn vec_dot_with(l: Layout, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = l.check_dot(n, w, a);
    let mut sum = 0.0f32;
    for (b, am) in l.absmaxes(w, nb).into_iter().enumerate() {
        let qs = &w[l.hdr + b * l.bb + l.qoff..][..QK / 2];
        let sw = am / 127.0;
        for s in 0..2 {
            let ab = &a[(2 * b + s) * A..][..A];
            let da = half::f16::from_le_bytes([ab[0], ab[1]]).to_f32();
            let sumi: i32 = (0..32)
                .map(|j| NF4_I8[code(qs, 32 * s + j) as usize] as i32 * ab[2 + j] as i8 as i32)
                .sum();
            sum += sumi as f32 * (sw * da);
        }
    }
    sum
}

/// Reference NF4 dot product with a Q8_0 row of `n` values: per 32 elements
/// `sumi * (absmax / 127 * d_a)`, `sumi = sum NF4_I8[q] a_q` exact, summed in `f32` in order.
pub fn vec_dot_ref(n: usize, w: &[u8], a: &[u8]) -> f32 {
    vec_dot_with(Layout::of(false), n, w, a)
}

/// [`vec_dot_ref`] for NF4_DQ rows.
pub fn vec_dot_dq_ref(n: usize, w: &[u8], a: &[u8]) -> f32 {
    vec_dot_with(Layout::of(true), n, w, a)
}

/// The fastest NF4 (`dq = false`) or NF4_DQ (`dq = true`) kernels that `isa` (capped to what
/// this CPU runs) allows.
pub fn kernels(isa: Isa, dq: bool) -> TypeKernels {
    if dq {
        let v = select_variant!(isa,
            scalar: Variant::scalar(dequantize_dq_ref, vec_dot_dq_ref),
            avx2: { vec_dot: x86::vec_dot_avx2::<true> },
            avx512: { vec_dot: x86::vec_dot_avx512::<true> },
        );
        v.kernels(DType::NF4_DQ, ActFormat::Q8_0)
    } else {
        let v = select_variant!(isa,
            scalar: Variant::scalar(dequantize_ref, vec_dot_ref),
            avx2: { vec_dot: x86::vec_dot_avx2::<false> },
            avx512: { vec_dot: x86::vec_dot_avx512::<false> },
        );
        v.kernels(DType::NF4, ActFormat::Q8_0)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;
