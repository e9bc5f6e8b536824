//! Activation quantization: converting an `f32` activation row into an [`ActFormat`].
//!
//! The F32, Q8_0 and Q8_1 quantizers live here; Q8_K lives beside the K-quants in `q8_k.rs`
//! and the per-row `I8Row` quantizer beside the INT8 weights in `int8.rs`.
//!
//! ```text
//! Q8_0 block (34 bytes): | d: f16 |        qs: 32 x i8          |   x[j] ~ qs[j] * d
//! Q8_1 block (36 bytes): | d: f16 | s: f16 | qs: 32 x i8        |   s = d * sum(qs)
//! ```
//!
//! Both use `d = amax / 127` and `qs = round(x / d)` with ties away from zero (llama.cpp's
//! reference rounding). The SIMD quantizers perform the same `f32` operations in the same
//! order, so their output is byte-identical to the reference. Quants never reach -128, which
//! the signed byte dot products rely on.

use std::sync::OnceLock;

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_0::{self, BlockQ8_0, QK};
use super::ActFormat;
use crate::cpu::Isa;

/// One Q8_1 activation block: Q8_0 plus `s = d * sum(qs)`, which lets a Q4_1 dot product
/// apply the weight block's minimum with one multiply.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_1 {
    /// Scale.
    pub d: f16,
    /// `d * sum(qs)`, rounded to `f16`.
    pub s: f16,
    /// Quants: `x[j] ~ qs[j] * d`.
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);
const _: () = assert!(ActFormat::Q8_1.block_bytes() == 36);

/// Quantizes an `f32` activation row into the bytes of its [`ActFormat`] row.
pub type QuantizeActFn = fn(&[f32], &mut [u8]);

/// Quantizers for every [`ActFormat`], indexed by `ActFormat as usize`.
pub struct ActKernels {
    pub quantize: [QuantizeActFn; 5],
}

impl ActKernels {
    /// The fastest quantizers `isa` can run.
    pub fn for_isa(isa: Isa) -> ActKernels {
        ActKernels {
            quantize: [
                quantize_f32,
                quantize_q8_0_for(isa),
                quantize_q8_1_for(isa),
                super::q8_k::quantize_for(isa),
                super::int8::quantize_act_for(isa),
            ],
        }
    }
}

/// The quantizers for this CPU, chosen once.
pub fn kernels() -> &'static ActKernels {
    static K: OnceLock<ActKernels> = OnceLock::new();
    K.get_or_init(|| ActKernels::for_isa(Isa::detected()))
}

const _: () = assert!(ActFormat::F32 as usize == 0 && ActFormat::Q8K as usize == 3);
const _: () = assert!(ActFormat::Q8_0 as usize == 1 && ActFormat::Q8_1 as usize == 2);
const _: () = assert!(ActFormat::I8Row as usize == 4);

fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(4)) {
        out.copy_from_slice(&x.to_le_bytes());
    }
}

/// Reference Q8_0 activation quantizer (the same as Q8_0 weight quantization).
pub fn quantize_q8_0_ref(x: &[f32]) -> Vec<BlockQ8_0> {
    q8_0::quantize_ref(x)
}

/// Reference Q8_1 quantizer (llama.cpp's `quantize_row_q8_1_ref`). `x.len()` must be a
/// multiple of 32.
pub fn quantize_q8_1_ref(x: &[f32]) -> Vec<BlockQ8_1> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q8_1: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK)
        .map(|x| {
            let b = q8_0::quantize_block(x);
            let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
            let d = amax_scale(x);
            BlockQ8_1 {
                d: b.d,
                s: f16::from_f32(sum as f32 * d),
                qs: b.qs,
            }
        })
        .collect()
}

/// The unrounded `f32` scale `amax / 127` of one block.
fn amax_scale(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0
}

fn check_lengths(src: &[f32], dst: &[u8], block_bytes: usize) -> usize {
    assert!(
        src.len().is_multiple_of(QK),
        "activation length {} is not a multiple of {QK}",
        src.len()
    );
    let nb = src.len() / QK;
    assert!(dst.len() >= nb * block_bytes, "activation buffer too short");
    nb
}

fn quantize_q8_0_scalar(src: &[f32], dst: &mut [u8]) {
    let nb = check_lengths(src, dst, 34);
    for (b, out) in quantize_q8_0_ref(src)
        .iter()
        .zip(dst[..nb * 34].chunks_exact_mut(34))
    {
        out.copy_from_slice(bytemuck::bytes_of(b));
    }
}

fn quantize_q8_1_scalar(src: &[f32], dst: &mut [u8]) {
    let nb = check_lengths(src, dst, 36);
    for (b, out) in quantize_q8_1_ref(src)
        .iter()
        .zip(dst[..nb * 36].chunks_exact_mut(36))
    {
        out.copy_from_slice(bytemuck::bytes_of(b));
    }
}

fn capped(isa: Isa) -> Isa {
    isa.min(Isa::supported())
}

/// The fastest Q8_0 activation quantizer `isa` (capped to what this CPU runs) allows.
pub fn quantize_q8_0_for(isa: Isa) -> QuantizeActFn {
    match capped(isa) {
        Isa::Scalar => quantize_q8_0_scalar,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::q8_0_avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => x86::q8_0_avx512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => quantize_q8_0_scalar,
    }
}

/// The fastest Q8_1 activation quantizer `isa` (capped to what this CPU runs) allows.
pub fn quantize_q8_1_for(isa: Isa) -> QuantizeActFn {
    match capped(isa) {
        Isa::Scalar => quantize_q8_1_scalar,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::q8_1_avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => x86::q8_1_avx512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => quantize_q8_1_scalar,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 and AVX-512 quantizers. Each block: `amax` by vector max, the scalar scale
    //! exactly as the reference computes it, `x * id` per lane, round half away from zero
    //! (`t = trunc(v); t + sign(v)` where `|v - t| >= 0.5`, all exact), narrow to bytes.
    use std::arch::x86_64::*;

    use super::{check_lengths, QK};

    /// `f32` to `f16` bits, rounding to nearest even (as `half::f16::from_f32`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn to_f16_bits(x: f32) -> u16 {
        _mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x))) as u16
    }

    /// `(d, id)` from a block's absolute maximum, exactly as the reference computes them.
    #[inline]
    fn scales(amax: f32) -> (f32, f32) {
        let d = amax / 127.0;
        (d, if d != 0.0 { 1.0 / d } else { 0.0 })
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn round_away_256(v: __m256) -> __m256 {
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0));
        let frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0), _mm256_sub_ps(v, t));
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
        _mm256_add_ps(
            t,
            _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0))),
        )
    }

    /// Quantizes the 32 floats at `x` into `qs` (32 bytes); returns `(d, sum(qs))` with the
    /// unrounded `f32` scale `d`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block_avx2(x: *const f32, qs: *mut u8) -> (f32, i32) {
        // SAFETY: the caller guarantees 32 readable floats at `x`.
        let v: [__m256; 4] = unsafe { std::array::from_fn(|k| _mm256_loadu_ps(x.add(8 * k))) };
        let abs = |v: __m256| _mm256_andnot_ps(_mm256_set1_ps(-0.0), v);
        let m = _mm256_max_ps(
            _mm256_max_ps(abs(v[0]), abs(v[1])),
            _mm256_max_ps(abs(v[2]), abs(v[3])),
        );
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let (d, id) = scales(_mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))));
        let q = v.map(|v| _mm256_cvtps_epi32(round_away_256(_mm256_mul_ps(v, _mm256_set1_ps(id)))));
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256::<1>(sum),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        let p = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: the caller guarantees 32 writable bytes at `qs`.
        unsafe { _mm256_storeu_si256(qs.cast(), p) };
        (d, _mm_cvtsi128_si32(s))
    }

    /// AVX-512 version of [`block_avx2`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn block_avx512(x: *const f32, qs: *mut u8) -> (f32, i32) {
        // SAFETY: the caller guarantees 32 readable floats at `x`.
        let v: [__m512; 2] = unsafe { [_mm512_loadu_ps(x), _mm512_loadu_ps(x.add(16))] };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
        let (d, id) = scales(amax);
        let q = v.map(|v| {
            let v = _mm512_mul_ps(v, _mm512_set1_ps(id));
            let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
            let frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
            let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(frac, _mm512_set1_ps(0.5));
            let one = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN)),
                _mm512_castps_si512(_mm512_set1_ps(1.0)),
            ));
            _mm512_cvtps_epi32(_mm512_mask_add_ps(t, up, t, one))
        });
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
        // SAFETY: the caller guarantees 32 writable bytes at `qs`.
        unsafe {
            _mm_storeu_si128(qs.cast(), _mm512_cvtsepi32_epi8(q[0]));
            _mm_storeu_si128(qs.add(16).cast(), _mm512_cvtsepi32_epi8(q[1]));
        }
        (d, sum)
    }

    macro_rules! quantizer {
        ($name:ident, $block:ident, $bytes:literal, $feat:literal) => {
            pub(super) fn $name(src: &[f32], dst: &mut [u8]) {
                let nb = check_lengths(src, dst, $bytes);
                #[target_feature(enable = $feat)]
                unsafe fn inner(nb: usize, src: *const f32, dst: *mut u8) {
                    for i in 0..nb {
                        // SAFETY: block i < nb of `src` (32 floats) and of `dst` ($bytes bytes)
                        // are in bounds; qs are the last 32 bytes of the block.
                        unsafe {
                            let out = dst.add(i * $bytes);
                            let (d, sum) = $block(src.add(i * QK), out.add($bytes - QK));
                            out.cast::<u16>().write_unaligned(to_f16_bits(d).to_le());
                            if $bytes == 36 {
                                let s = to_f16_bits(sum as f32 * d).to_le();
                                out.add(2).cast::<u16>().write_unaligned(s);
                            }
                        }
                    }
                }
                // SAFETY: handed out only when the CPU has the target features; both buffers
                // hold `nb` blocks (checked above).
                unsafe { inner(nb, src.as_ptr(), dst.as_mut_ptr()) }
            }
        };
    }

    quantizer!(q8_0_avx2, block_avx2, 34, "avx2,fma,f16c");
    quantizer!(q8_1_avx2, block_avx2, 36, "avx2,fma,f16c");
    quantizer!(
        q8_0_avx512,
        block_avx512,
        34,
        "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
    );
    quantizer!(
        q8_1_avx512,
        block_avx512,
        36,
        "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
    );
}
