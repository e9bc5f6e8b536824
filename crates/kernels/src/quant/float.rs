//! Float weight formats: [`DType::F32`], [`DType::F16`] and [`DType::BF16`].
//!
//! A float weight row is multiplied with an [`ActFormat::F32`] activation row (little-endian
//! `f32` bytes). Every element converts to `f32` exactly, so `dequantize` is bit-exact on every
//! ISA; `vec_dot` variants (and the 4 × 4 tile kernels of [`super::float_tile`], which products
//! of several rows use) differ from the reference only in summation order. The reference
//! sums exact products in `f64`, so it is the most accurate of them.
//!
//! ```text
//! F32 : [b0 b1 b2 b3]            IEEE binary32, little-endian
//! F16 : [b0 b1]                  IEEE binary16, little-endian
//! BF16: [b0 b1]                  upper 16 bits of a binary32: f32::from_bits((b as u32) << 16)
//! ```

use half::{bf16, f16};

use super::dispatch::{DequantizeFn, VecDotFn};
use super::{ActFormat, DType, TypeKernels};

/// A `(dequantize, vec_dot)` pair.
type KernelFns = (DequantizeFn, VecDotFn);
use crate::cpu::Isa;

/// One float element type: its width and its exact conversion to `f32`.
trait Elem {
    const BYTES: usize;
    fn decode(b: &[u8]) -> f32;
}

struct F32E;
struct F16E;
struct Bf16E;

impl Elem for F32E {
    const BYTES: usize = 4;
    fn decode(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl Elem for F16E {
    const BYTES: usize = 2;
    fn decode(b: &[u8]) -> f32 {
        f16::from_le_bytes([b[0], b[1]]).to_f32()
    }
}

impl Elem for Bf16E {
    const BYTES: usize = 2;
    fn decode(b: &[u8]) -> f32 {
        bf16::from_le_bytes([b[0], b[1]]).to_f32()
    }
}

/// Bytes per element of a float `dtype`; panics for quantized types (a caller bug).
fn elem_bytes(dtype: DType) -> usize {
    match dtype {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        other => panic!("{other} is not a float type"),
    }
}

fn dequantize_scalar<E: Elem>(src: &[u8], dst: &mut [f32]) {
    assert!(
        src.len() >= dst.len() * E::BYTES,
        "float dequantize: source too short"
    );
    for (b, d) in src.chunks_exact(E::BYTES).zip(dst.iter_mut()) {
        *d = E::decode(b);
    }
}

fn vec_dot_scalar<E: Elem>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(n, w, a, E::BYTES);
    let w = w.chunks_exact(E::BYTES);
    let a = a.chunks_exact(4).map(F32E::decode);
    // Products of two f32 values are exact in f64; only the sum rounds.
    w.zip(a)
        .take(n)
        .map(|(w, a)| E::decode(w) as f64 * a as f64)
        .sum::<f64>() as f32
}

fn check_dot(n: usize, w: &[u8], a: &[u8], bytes: usize) {
    assert!(
        w.len() >= n * bytes,
        "float vec_dot: weight row shorter than n"
    );
    assert!(
        a.len() >= n * 4,
        "float vec_dot: activation row shorter than n"
    );
}

/// Reference dequantization (the spec): decode `dst.len()` elements of `dtype` from `src`.
pub fn dequantize_ref(dtype: DType, src: &[u8], dst: &mut [f32]) {
    match elem_bytes(dtype) {
        4 => dequantize_scalar::<F32E>(src, dst),
        _ if dtype == DType::F16 => dequantize_scalar::<F16E>(src, dst),
        _ => dequantize_scalar::<Bf16E>(src, dst),
    }
}

/// Reference dot product (the spec) of a `dtype` weight row with `a` (`a.len()` elements):
/// exact products summed in `f64`, rounded once to `f32`.
pub fn vec_dot_ref(dtype: DType, w: &[u8], a: &[f32]) -> f32 {
    let bytes: &[u8] = bytemuck::cast_slice(a);
    let n = a.len();
    match elem_bytes(dtype) {
        4 => vec_dot_scalar::<F32E>(n, w, bytes),
        _ if dtype == DType::F16 => vec_dot_scalar::<F16E>(n, w, bytes),
        _ => vec_dot_scalar::<Bf16E>(n, w, bytes),
    }
}

/// The fastest kernels for the float `dtype` that `isa` (capped to what this CPU runs) allows.
///
/// Panics if `dtype` is quantized.
pub fn kernels(dtype: DType, isa: Isa) -> TypeKernels {
    elem_bytes(dtype);
    let isa = isa.min(Isa::supported());
    let (dequantize, vec_dot): KernelFns = match (dtype, isa) {
        (DType::F32, Isa::Scalar) => (dequantize_scalar::<F32E>, vec_dot_scalar::<F32E>),
        (DType::F16, Isa::Scalar) => (dequantize_scalar::<F16E>, vec_dot_scalar::<F16E>),
        (_, Isa::Scalar) => (dequantize_scalar::<Bf16E>, vec_dot_scalar::<Bf16E>),
        #[cfg(target_arch = "x86_64")]
        (_, simd) => x86::select(dtype, simd),
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("only Isa::Scalar is available off x86-64"),
    };
    TypeKernels {
        dtype,
        isa,
        act: ActFormat::F32,
        dequantize,
        vec_dot,
        vec_dot_tile: tile_kernel(dtype, isa),
        vec_dot_rows: rows_kernel(dtype, isa),
    }
}

/// The 4-row decode kernel ([`super::float_tile`]) for `dtype` on `isa`; none for scalar code.
fn rows_kernel(dtype: DType, isa: Isa) -> Option<super::VecDotRowsFn> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        simd => Some(super::float_tile::select_rows(dtype, simd)),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

/// The 4 × 4 tile kernel ([`super::float_tile`]) for `dtype` on `isa`; none for scalar code.
fn tile_kernel(dtype: DType, isa: Isa) -> Option<super::VecDotTileFn> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        simd => Some(super::float_tile::select(dtype, simd)),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    //! AVX2 (+FMA, F16C) and AVX-512 variants. Each `unsafe fn` requires its target features
    //! (guaranteed by `kernels`, which caps the ISA to what the CPU runs) and in-bounds
    //! pointers for `n` elements (guaranteed by the safe wrappers' length asserts).
    use std::arch::x86_64::*;

    use super::{check_dot, Bf16E, DType, Elem, Isa, KernelFns, F16E, F32E};

    pub(super) fn select(dtype: DType, isa: Isa) -> KernelFns {
        match (dtype, isa) {
            (DType::F32, Isa::Avx2) => (super::dequantize_scalar::<F32E>, dot_f32_avx2),
            (DType::F16, Isa::Avx2) => (deq_f16_avx2, dot_f16_avx2),
            (_, Isa::Avx2) => (deq_bf16_avx2, dot_bf16_avx2),
            (DType::F32, _) => (super::dequantize_scalar::<F32E>, dot_f32_avx512),
            (DType::F16, _) => (deq_f16_avx512, dot_f16_avx512),
            _ => (deq_bf16_avx512, dot_bf16_avx512),
        }
    }

    // ---- element loaders: 8 (AVX2) or 16 (AVX-512) elements from an unaligned pointer ----

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn ld8_f32(p: *const u8) -> __m256 {
        // SAFETY: caller guarantees 32 readable bytes at `p`; the load is unaligned.
        unsafe { _mm256_loadu_ps(p.cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn ld8_f16(p: *const u8) -> __m256 {
        // SAFETY: caller guarantees 16 readable bytes at `p`; the load is unaligned.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn ld8_bf16(p: *const u8) -> __m256 {
        // SAFETY: caller guarantees 16 readable bytes at `p`; the load is unaligned.
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn ld16_f32(p: *const u8) -> __m512 {
        // SAFETY: caller guarantees 64 readable bytes at `p`; the load is unaligned.
        unsafe { _mm512_loadu_ps(p.cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn ld16_f16(p: *const u8) -> __m512 {
        // SAFETY: caller guarantees 32 readable bytes at `p`; the load is unaligned.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn ld16_bf16(p: *const u8) -> __m512 {
        // SAFETY: caller guarantees 32 readable bytes at `p`; the load is unaligned.
        let h = unsafe { _mm256_loadu_si256(p.cast()) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) fn hsum256(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// Scalar tail `i..n` of a dot product, in f32.
    fn tail<E: Elem>(i: usize, n: usize, w: &[u8], a: &[u8]) -> f32 {
        (i..n)
            .map(|k| E::decode(&w[k * E::BYTES..]) * F32E::decode(&a[k * 4..]))
            .sum()
    }

    macro_rules! dot_avx2 {
        ($name:ident, $elem:ty, $ld:ident) => {
            fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
                check_dot(n, w, a, <$elem>::BYTES);
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn inner(n: usize, w: *const u8, a: *const u8) -> (f32, usize) {
                    const B: usize = <$elem>::BYTES;
                    let mut acc = [_mm256_setzero_ps(); 4];
                    let mut i = 0;
                    // SAFETY: every load reads elements i..i+32 (or i..i+8) with i+32 <= n
                    // (or i+8 <= n), within the rows the wrapper checked.
                    unsafe {
                        while i + 32 <= n {
                            for (k, acc) in acc.iter_mut().enumerate() {
                                let j = i + 8 * k;
                                *acc =
                                    _mm256_fmadd_ps($ld(w.add(j * B)), ld8_f32(a.add(j * 4)), *acc);
                            }
                            i += 32;
                        }
                        while i + 8 <= n {
                            acc[0] =
                                _mm256_fmadd_ps($ld(w.add(i * B)), ld8_f32(a.add(i * 4)), acc[0]);
                            i += 8;
                        }
                    }
                    let s =
                        _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
                    (hsum256(s), i)
                }
                // SAFETY: `kernels` hands this out only when the CPU has AVX2+FMA+F16C; the
                // rows hold at least `n` elements (checked above).
                let (s, i) = unsafe { inner(n, w.as_ptr(), a.as_ptr()) };
                s + tail::<$elem>(i, n, w, a)
            }
        };
    }

    macro_rules! dot_avx512 {
        ($name:ident, $elem:ty, $ld:ident) => {
            fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
                check_dot(n, w, a, <$elem>::BYTES);
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn inner(n: usize, w: *const u8, a: *const u8) -> (f32, usize) {
                    const B: usize = <$elem>::BYTES;
                    let mut acc = [_mm512_setzero_ps(); 4];
                    let mut i = 0;
                    // SAFETY: every load reads elements i..i+64 (or i..i+16) with i+64 <= n
                    // (or i+16 <= n), within the rows the wrapper checked.
                    unsafe {
                        while i + 64 <= n {
                            for (k, acc) in acc.iter_mut().enumerate() {
                                let j = i + 16 * k;
                                *acc = _mm512_fmadd_ps(
                                    $ld(w.add(j * B)),
                                    ld16_f32(a.add(j * 4)),
                                    *acc,
                                );
                            }
                            i += 64;
                        }
                        while i + 16 <= n {
                            acc[0] =
                                _mm512_fmadd_ps($ld(w.add(i * B)), ld16_f32(a.add(i * 4)), acc[0]);
                            i += 16;
                        }
                    }
                    let s =
                        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
                    (_mm512_reduce_add_ps(s), i)
                }
                // SAFETY: `kernels` hands this out only when the CPU has AVX-512 F/BW/VL (plus
                // AVX2/FMA/F16C); the rows hold at least `n` elements (checked above).
                let (s, i) = unsafe { inner(n, w.as_ptr(), a.as_ptr()) };
                s + tail::<$elem>(i, n, w, a)
            }
        };
    }

    dot_avx2!(dot_f32_avx2, F32E, ld8_f32);
    dot_avx2!(dot_f16_avx2, F16E, ld8_f16);
    dot_avx2!(dot_bf16_avx2, Bf16E, ld8_bf16);
    dot_avx512!(dot_f32_avx512, F32E, ld16_f32);
    dot_avx512!(dot_f16_avx512, F16E, ld16_f16);
    dot_avx512!(dot_bf16_avx512, Bf16E, ld16_bf16);

    macro_rules! deq_simd {
        ($name:ident, $elem:ty, $feat:literal, $lanes:literal, $ld:ident, $st:ident) => {
            fn $name(src: &[u8], dst: &mut [f32]) {
                const B: usize = <$elem>::BYTES;
                assert!(
                    src.len() >= dst.len() * B,
                    "float dequantize: source too short"
                );
                #[target_feature(enable = $feat)]
                unsafe fn inner(src: *const u8, dst: *mut f32, n: usize) -> usize {
                    let mut i = 0;
                    while i + $lanes <= n {
                        // SAFETY: elements i..i+lanes are in bounds of both rows (i+lanes <= n).
                        unsafe { $st(dst.add(i), $ld(src.add(i * B))) };
                        i += $lanes;
                    }
                    i
                }
                // SAFETY: `kernels` hands this out only when the CPU has the target features;
                // `src` holds at least `dst.len()` elements (checked above).
                let i = unsafe { inner(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
                super::dequantize_scalar::<$elem>(&src[i * B..], &mut dst[i..]);
            }
        };
    }

    deq_simd!(
        deq_f16_avx2,
        F16E,
        "avx2,fma,f16c",
        8,
        ld8_f16,
        _mm256_storeu_ps
    );
    deq_simd!(
        deq_bf16_avx2,
        Bf16E,
        "avx2,fma,f16c",
        8,
        ld8_bf16,
        _mm256_storeu_ps
    );
    deq_simd!(
        deq_f16_avx512,
        F16E,
        "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
        16,
        ld16_f16,
        _mm512_storeu_ps
    );
    deq_simd!(
        deq_bf16_avx512,
        Bf16E,
        "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
        16,
        ld16_bf16,
        _mm512_storeu_ps
    );
}
