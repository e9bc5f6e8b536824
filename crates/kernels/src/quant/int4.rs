//! [`DType::INT4_G32`], [`DType::INT4_G64`], [`DType::INT4_G128`]: group-wise asymmetric
//! 4-bit weights with an integer zero point (AWQ / GPTQ semantics), one implementation
//! generic over the number `S` of 32-element sub-blocks per group (`G = 32 S`).
//! Multiplied with [`ActFormat::Q8_1`] activations.
//!
//! ```text
//! BlockInt4<S> (4 + 16 S bytes, G = 32 S weights)
//! +--------+-------+----------+----------------+----------------+-----+
//! | d: f16 | z: u8 | 0: u8    | sub-block 0    | sub-block 1    | ... |
//! +--------+-------+----------+----------------+----------------+-----+
//! sub-block s (16 bytes), as Q4_0 / Q4_1 pack a block:
//!   byte j = q[32 s + j] | q[32 s + j + 16] << 4        (j in 0..16)
//! w = d * (q - z),  q in 0..=15,  z in 0..=15
//! ```
//!
//! Dot product with the Q8_1 blocks `(d_a, s_a = d_a sum(a_q), a_q)` of the same 32 elements:
//! per group `d * sum_s (d_a * sum_j q_j a_qj - z * s_a)`: the zero point costs one multiply
//! per sub-block, and `q` being unsigned suits `maddubs` / `vpdpbusd` directly.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::act::BlockQ8_1;
use super::dispatch::{select_variant, Variant};
use super::rows::cast_blocks;
use super::{ActFormat, DType, TypeKernels, TILE};
use crate::cpu::Isa;

/// Elements per sub-block (one Q8_1 activation block).
pub const QK: usize = 32;
/// Bytes of one Q8_1 activation block.
const A: usize = 36;

/// One group of `32 S` weights.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockInt4<const S: usize> {
    /// Scale.
    pub d: f16,
    /// Integer zero point, `0..=15`.
    pub z: u8,
    /// Always 0.
    pub reserved: u8,
    /// Packed codes of each 32-element sub-block (see the module docs).
    pub qs: [[u8; QK / 2]; S],
}

// SAFETY: `repr(C)` of `f16`, two `u8` and byte arrays: alignment 2, size `4 + 16 S` (even),
// so there is no padding, and every bit pattern is a valid value.
unsafe impl<const S: usize> Zeroable for BlockInt4<S> {}
// SAFETY: as above; the type is `Copy + 'static` and holds no pointers.
unsafe impl<const S: usize> Pod for BlockInt4<S> {}

const _: () = assert!(std::mem::size_of::<BlockInt4<1>>() == DType::INT4_G32.block_bytes());
const _: () = assert!(std::mem::size_of::<BlockInt4<2>>() == DType::INT4_G64.block_bytes());
const _: () = assert!(std::mem::size_of::<BlockInt4<4>>() == DType::INT4_G128.block_bytes());

/// The INT4 type with group size `g` (32, 64 or 128).
pub const fn dtype_for_group(g: usize) -> Option<DType> {
    match g {
        32 => Some(DType::INT4_G32),
        64 => Some(DType::INT4_G64),
        128 => Some(DType::INT4_G128),
        _ => None,
    }
}

fn check_group(group: usize) -> usize {
    assert!(
        dtype_for_group(group).is_some(),
        "INT4: group size {group} is not 32, 64 or 128"
    );
    4 + group / 2
}

/// Packs one group: `d` (stored as `f16`), zero point `z` and the `group` codes `q` (each
/// `0..=15`) into the `4 + group / 2` bytes of `out`.
///
/// # Panics
/// If `q.len()` is not 32, 64 or 128, `out` is too short, or a code or `z` exceeds 15.
pub fn encode_block(d: f32, z: u8, q: &[u8], out: &mut [u8]) {
    let bytes = check_group(q.len());
    assert!(out.len() >= bytes, "INT4: output buffer too short");
    assert!(
        z <= 15 && q.iter().all(|&c| c <= 15),
        "INT4: codes must be 0..=15"
    );
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    out[2] = z;
    out[3] = 0;
    for (s, sub) in q.chunks_exact(QK).enumerate() {
        for j in 0..QK / 2 {
            out[4 + 16 * s + j] = sub[j] | sub[j + QK / 2] << 4;
        }
    }
}

/// Packs a row of codes computed elsewhere (GPTQ, AWQ, checkpoint import): group `k` has
/// scale `scales[k]`, zero point `zeros[k]` and codes `codes[group k .. group (k + 1)]`.
///
/// # Panics
/// If the lengths disagree (`codes.len() = group * scales.len() = group * zeros.len()`),
/// `out` is shorter than the row, or [`encode_block`] panics.
pub fn encode_row(group: usize, scales: &[f32], zeros: &[u8], codes: &[u8], out: &mut [u8]) {
    let bytes = check_group(group);
    assert!(
        codes.len() == group * scales.len() && scales.len() == zeros.len(),
        "INT4: {} codes, {} scales and {} zeros do not form groups of {group}",
        codes.len(),
        scales.len(),
        zeros.len()
    );
    assert!(
        out.len() >= scales.len() * bytes,
        "INT4: output buffer too short"
    );
    for (k, (q, blk)) in codes
        .chunks_exact(group)
        .zip(out.chunks_exact_mut(bytes))
        .enumerate()
    {
        encode_block(scales[k], zeros[k], q, blk);
    }
}

/// Round-to-nearest scale, zero point and codes of one group (AutoAWQ's range: the group's
/// min and max widened to include 0). `d = (max - min) / 15` (1 for a constant-zero group)
/// is rounded to `f16` first and the codes use the rounded value:
/// `z = clamp(round(-min / d), 0, 15)`, `q = clamp(round(x / d) + z, 0, 15)`.
pub fn rtn_group(x: &[f32]) -> (f16, u8, Vec<u8>) {
    let (lo, hi) = x
        .iter()
        .fold((0.0f32, 0.0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let d = (hi - lo) / 15.0;
    let mut d16 = f16::from_f32(if d > 0.0 { d } else { 1.0 }).min(f16::MAX);
    if d16.to_f32() == 0.0 {
        // The range underflows f16: every value rounds to the zero point anyway.
        d16 = f16::ONE;
    }
    let df = d16.to_f32();
    let z = (-lo / df).round().clamp(0.0, 15.0);
    let q = x
        .iter()
        .map(|&v| ((v / df).round() + z).clamp(0.0, 15.0) as u8)
        .collect();
    (d16, z as u8, q)
}

/// Round-to-nearest quantization of `x` (a whole number of groups of `group`) into INT4
/// bytes with [`rtn_group`] per group.
pub fn quantize_row_rtn(group: usize, x: &[f32]) -> Vec<u8> {
    let bytes = check_group(group);
    assert!(
        x.len().is_multiple_of(group),
        "INT4: length {} is not a multiple of {group}",
        x.len()
    );
    let mut out = vec![0u8; x.len() / group * bytes];
    for (g, blk) in x.chunks_exact(group).zip(out.chunks_exact_mut(bytes)) {
        let (d, z, q) = rtn_group(g);
        encode_block(d.to_f32(), z, &q, blk);
    }
    out
}

/// Code `j` (0..32) of a packed sub-block.
#[inline]
fn code(sub: &[u8; 16], j: usize) -> u8 {
    if j < 16 {
        sub[j] & 0x0F
    } else {
        sub[j - 16] >> 4
    }
}

/// Reference dequantization: `w = d * (q - z)` (the integer difference, then one multiply).
pub fn dequantize_ref<const S: usize>(blocks: &[BlockInt4<S>], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK * S,
        "INT4 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK * S)) {
        let d = b.d.to_f32();
        for (k, y) in o.iter_mut().enumerate() {
            *y = (code(&b.qs[k / QK], k % QK) as i32 - b.z as i32) as f32 * d;
        }
    }
}

/// Reference dot product: per group `d * sum_s (d_a * sumi_s - z * s_a)`, summed in `f32`
/// in order (`sumi_s` the exact integer sum of sub-block `s`).
pub fn vec_dot_ref<const S: usize>(w: &[BlockInt4<S>], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (x, ys) in w.iter().zip(a.chunks_exact(S)) {
        let mut acc = 0.0f32;
        for (sub, y) in x.qs.iter().zip(ys) {
            let sumi: i32 = (0..QK).map(|j| code(sub, j) as i32 * y.qs[j] as i32).sum();
            acc += y.d.to_f32() * sumi as f32 - x.z as f32 * y.s.to_f32();
        }
        sum += x.d.to_f32() * acc;
    }
    sum
}

const fn block_bytes<const S: usize>() -> usize {
    4 + 16 * S
}

/// Checks a dot product's arguments; returns the group count.
fn check_dot<const S: usize>(n: usize, w: &[u8], a: &[u8]) -> usize {
    assert!(
        n.is_multiple_of(QK * S),
        "vec_dot: n = {n} is not a multiple of {}",
        QK * S
    );
    let nb = n / (QK * S);
    assert!(
        w.len() >= nb * block_bytes::<S>(),
        "vec_dot: weight row shorter than n"
    );
    assert!(
        a.len() >= nb * S * A,
        "vec_dot: activation row shorter than n"
    );
    nb
}

fn dequantize_scalar<const S: usize>(src: &[u8], dst: &mut [f32]) {
    let nb = dst.len().div_ceil(QK * S);
    dequantize_ref::<S>(&cast_blocks(&src[..nb * block_bytes::<S>()]), dst);
}

fn vec_dot_scalar<const S: usize>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = check_dot::<S>(n, w, a);
    let (bw, ba) = (nb * block_bytes::<S>(), nb * S * A);
    vec_dot_ref::<S>(&cast_blocks(&w[..bw]), &cast_blocks(&a[..ba]))
}

/// The fastest INT4 kernels with `S` sub-blocks per group (`S` = 1, 2, 4 for G32, G64,
/// G128) that `isa` (capped to what this CPU runs) allows.
pub fn kernels<const S: usize>(isa: Isa) -> TypeKernels {
    let dtype = match dtype_for_group(QK * S) {
        Some(t) => t,
        None => panic!("INT4: {S} sub-blocks per group is not a supported group size"),
    };
    let v = select_variant!(isa,
        scalar: Variant::scalar(dequantize_scalar::<S>, vec_dot_scalar::<S>),
        avx2: { vec_dot: x86::vec_dot_avx2::<S> },
        avx512: {
            vec_dot: x86::vec_dot_avx512::<S>,
            vec_dot_tile: x86::vec_dot_tile_avx512::<S>,
        },
    );
    v.kernels(dtype, ActFormat::Q8_1)
}

/// [`check_dot`] for every pair of a tile.
fn check_tile<const S: usize>(n: usize, w: &[&[u8]; TILE], a: &[&[u8]; TILE]) -> usize {
    let nb = check_dot::<S>(n, w[0], a[0]);
    for (wr, ar) in w.iter().zip(a) {
        check_dot::<S>(n, wr, ar);
    }
    nb
}

#[cfg(target_arch = "x86_64")]
mod x86;
