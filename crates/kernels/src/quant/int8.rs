//! [`DType::INT8`]: per-output-channel symmetric int8 weights, multiplied with per-token
//! dynamic int8 activations ([`ActFormat::I8Row`]): the W8A8 fast path.
//!
//! ```text
//! INT8 weight row / I8Row activation row of n values (n % 32 == 0), 4 + n bytes
//! +--------------+-----------------------------------------+
//! | scale: f32   | q[0] q[1] ...                  q[n - 1] |   x[j] ~ scale * q[j]
//! +--------------+-----------------------------------------+
//! scale = amax / 127,  q = round(x / scale) (ties away from zero), q in -127..=127
//! ```
//!
//! The dot product of a weight row and an activation row is one integer sum over the whole
//! row, scaled once: `w_scale * a_scale * sum_j q_w[j] q_a[j]`. The sum is exact: the SIMD
//! kernels keep per-lane `i32` sums (no lane can overflow for `n <=` [`MAX_N`]) and reduce
//! them in `i64`, so every variant returns the reference's value bit for bit.
//!
//! The block size 32 (32 bytes) only fixes the granularity of `n`; the row has one scale.

use super::dispatch::{capped, select_variant, Variant};
use super::{ActFormat, DType, TypeKernels, TILE};
use crate::cpu::Isa;

/// Bytes of the per-row header (the `f32` scale).
pub const HEADER: usize = 4;
/// Granularity of the row length.
pub const QK: usize = 32;
/// Longest row the kernels accept: per-lane `i32` sums of up to `n / 8` products of at most
/// `128 * 127` cannot overflow.
pub const MAX_N: usize = 1 << 20;

const _: () = assert!(DType::INT8.row_header_bytes() == HEADER);
const _: () = assert!(ActFormat::I8Row.row_header_bytes() == HEADER);

/// `(scale, 1 / scale)` for a row with absolute maximum `amax` (`(0, 0)` for a zero row).
fn scales(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

fn check_len(n: usize, out: usize) {
    assert!(
        n.is_multiple_of(QK),
        "INT8: length {n} is not a multiple of {QK}"
    );
    assert!(out >= HEADER + n, "INT8: output buffer too short");
}

/// Reference row quantizer (weights and `I8Row` activations alike): writes the `4 + n`
/// bytes of `x`'s row to `out`. `scale = amax / 127`, `q = round(x * (1 / scale))`, ties away
/// from zero.
pub fn quantize_row_ref(x: &[f32], out: &mut [u8]) {
    check_len(x.len(), out.len());
    let (d, id) = scales(x);
    out[..HEADER].copy_from_slice(&d.to_le_bytes());
    for (o, v) in out[HEADER..HEADER + x.len()].iter_mut().zip(x) {
        *o = (v * id).round() as i8 as u8;
    }
}

/// Packs codes computed elsewhere (GPTQ-int8, checkpoint import) into a row: `w = scale * q`.
///
/// # Panics
/// If `q.len()` is not a multiple of 32, `out` is shorter than `4 + q.len()`, or a code is
/// -128 (the format uses -127..=127).
pub fn encode_row(scale: f32, q: &[i8], out: &mut [u8]) {
    check_len(q.len(), out.len());
    assert!(!q.contains(&i8::MIN), "INT8: codes must lie in -127..=127");
    out[..HEADER].copy_from_slice(&scale.to_le_bytes());
    for (o, &c) in out[HEADER..HEADER + q.len()].iter_mut().zip(q) {
        *o = c as u8;
    }
}

fn scale_of(row: &[u8]) -> f32 {
    f32::from_le_bytes([row[0], row[1], row[2], row[3]])
}

/// Reference dequantization: `out[j] = scale * q[j]` for `out.len()` values.
pub fn dequantize_ref(row: &[u8], out: &mut [f32]) {
    check_len(out.len(), row.len());
    let d = scale_of(row);
    for (o, &q) in out.iter_mut().zip(&row[HEADER..]) {
        *o = q as i8 as f32 * d;
    }
}

/// The exact integer dot product of the first `n` codes of two rows.
pub fn dot_codes_ref(n: usize, w: &[u8], a: &[u8]) -> i64 {
    w[HEADER..HEADER + n]
        .iter()
        .zip(&a[HEADER..HEADER + n])
        .map(|(&p, &q)| p as i8 as i64 * q as i8 as i64)
        .sum()
}

/// Reference dot product of an INT8 weight row with an `I8Row` activation row of `n`
/// values: `sum as f32 * (w_scale * a_scale)`.
pub fn vec_dot_ref(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot(n, w, a);
    finish(dot_codes_ref(n, w, a), w, a)
}

/// `sum * (w_scale * a_scale)`, the last step of every variant.
fn finish(sum: i64, w: &[u8], a: &[u8]) -> f32 {
    sum as f32 * (scale_of(w) * scale_of(a))
}

fn check_dot(n: usize, w: &[u8], a: &[u8]) {
    assert!(
        n.is_multiple_of(QK),
        "vec_dot: n = {n} is not a multiple of {QK}"
    );
    assert!(
        n <= MAX_N,
        "vec_dot: INT8 rows are limited to {MAX_N} values"
    );
    assert!(w.len() >= HEADER + n, "vec_dot: weight row shorter than n");
    assert!(
        a.len() >= HEADER + n,
        "vec_dot: activation row shorter than n"
    );
}

fn check_tile(n: usize, w: &[&[u8]; TILE], a: &[&[u8]; TILE]) {
    for (wr, ar) in w.iter().zip(a) {
        check_dot(n, wr, ar);
    }
}

fn quantize_act_scalar(src: &[f32], dst: &mut [u8]) {
    quantize_row_ref(src, dst)
}

/// The fastest `I8Row` activation quantizer `isa` (capped to what this CPU runs) allows;
/// every variant writes the reference's bytes.
pub fn quantize_act_for(isa: Isa) -> super::act::QuantizeActFn {
    match capped(isa) {
        Isa::Scalar => quantize_act_scalar,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::quantize_avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => x86::quantize_avx512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => quantize_act_scalar,
    }
}

/// The fastest INT8 kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: Variant::scalar(dequantize_ref, vec_dot_ref),
        avx2: { vec_dot: x86::vec_dot_avx2 },
        avx512: { vec_dot: x86::vec_dot_avx512, vec_dot_tile: x86::vec_dot_tile_avx512 },
    );
    v.kernels(DType::INT8, ActFormat::I8Row)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 (`maddubs` with the sign moved onto the activation) and AVX-512 VNNI kernels.
    //!
    //! VNNI `vpdpbusd` multiplies unsigned by signed bytes, so weights are biased to
    //! `w + 128` (`xor 0x80`) and `128 * sum(a)` (one more `vpdpbusd` of `0x80` bytes with
    //! `a`) is subtracted per lane: `sum((w + 128) a) - 128 sum(a) = sum(w a)`, exact modulo
    //! 2^32 per lane and hence exact, since each lane's true sum fits in `i32`.
    use std::arch::x86_64::*;

    use super::{check_dot, check_tile, finish, scales, HEADER, QK, TILE};

    /// `i32` lanes summed in `i64`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn reduce_i64_512(v: __m512i) -> i64 {
        let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
        let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(v));
        _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi))
    }

    /// The mask of codes `k..min(k + 64, n)` (`k < n`).
    #[inline]
    fn code_mask(n: usize, k: usize) -> __mmask64 {
        if n - k >= 64 {
            !0
        } else {
            (1u64 << (n - k)) - 1
        }
    }

    /// The codes at `p + k` under `mask`, zeros where it is clear.
    ///
    /// # Safety
    /// The CPU has AVX-512 BW; the bytes of `p + k` that `mask` selects are readable.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn load_codes(p: *const u8, k: usize, mask: __mmask64) -> __m512i {
        // SAFETY: the caller guarantees the selected bytes are readable; masked-off bytes
        // are not read.
        unsafe { _mm512_maskz_loadu_epi8(mask, p.add(k).cast()) }
    }

    /// Lane sums `sum((w + 128) a) - 128 sum(a)` over the `n` codes at `w` and `a`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn lanes_avx512(n: usize, w: *const u8, a: *const u8) -> __m512i {
        let bias = _mm512_set1_epi8(-128);
        let (mut acc, mut sum_a) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let mut k = 0;
        while k < n {
            let mask = code_mask(n, k);
            // SAFETY: bytes k..min(k + 64, n) of both code arrays are in bounds; masked-off
            // bytes are not read.
            let (x, y) = unsafe { (load_codes(w, k, mask), load_codes(a, k, mask)) };
            acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(x, bias), y);
            sum_a = _mm512_dpbusd_epi32(sum_a, bias, y);
            k += 64;
        }
        _mm512_sub_epi32(acc, sum_a)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        check_dot(n, w, a);
        // SAFETY: both rows hold a header and `n` codes (checked above); the features are
        // enabled here.
        let sum = unsafe {
            reduce_i64_512(lanes_avx512(
                n,
                w.as_ptr().add(HEADER),
                a.as_ptr().add(HEADER),
            ))
        };
        finish(sum, w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
        check_dot(n, w, a);
        // SAFETY: both rows hold a header and `n` codes (checked above); the features are
        // enabled here.
        let sum = unsafe { dot_avx2(n, w.as_ptr().add(HEADER), a.as_ptr().add(HEADER)) };
        finish(sum, w, a)
    }

    /// `sum(w a)` as `|w| * sign(a, w)` byte products; exact because activation codes are
    /// never -128 and `|w| * |a| * 2 <= 128 * 127 * 2` fits `maddubs`' `i16`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_avx2(n: usize, w: *const u8, a: *const u8) -> i64 {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); 2];
        for k in 0..n / QK {
            // SAFETY: bytes 32k..32k + 32 < n of both code arrays are in bounds.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_si256(w.add(QK * k).cast()),
                    _mm256_loadu_si256(a.add(QK * k).cast()),
                )
            };
            let p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
            acc[k & 1] = _mm256_add_epi32(acc[k & 1], _mm256_madd_epi16(p, ones));
        }
        let mut lanes = [0i32; 16];
        // SAFETY: `lanes` holds 16 `i32`s.
        unsafe {
            _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc[0]);
            _mm256_storeu_si256(lanes.as_mut_ptr().add(8).cast(), acc[1]);
        }
        lanes.iter().map(|&v| v as i64).sum()
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_tile_avx512(
        n: usize,
        w: [&[u8]; TILE],
        a: [&[u8]; TILE],
    ) -> [[f32; TILE]; TILE] {
        check_tile(n, &w, &a);
        // SAFETY: every row holds a header and `n` codes (checked above); the features are
        // enabled here.
        let sums = unsafe {
            tile_avx512(
                n,
                w.map(|r| r.as_ptr().add(HEADER)),
                a.map(|r| r.as_ptr().add(HEADER)),
            )
        };
        std::array::from_fn(|j| std::array::from_fn(|r| finish(sums[j][r], w[r], a[j])))
    }

    /// 4 weight rows x 4 activation rows, 64 codes per step: 16 + 4 accumulators.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_avx512(
        n: usize,
        w: [*const u8; TILE],
        a: [*const u8; TILE],
    ) -> [[i64; TILE]; TILE] {
        let bias = _mm512_set1_epi8(-128);
        let mut acc = [[_mm512_setzero_si512(); TILE]; TILE];
        let mut sum_a = [_mm512_setzero_si512(); TILE];
        let mut k = 0;
        while k < n {
            let mask = code_mask(n, k);
            // SAFETY: bytes k..min(k + 64, n) of every row are in bounds; masked-off bytes
            // are not read.
            let (x, y) = unsafe {
                (
                    w.map(|p| _mm512_xor_si512(load_codes(p, k, mask), bias)),
                    a.map(|p| load_codes(p, k, mask)),
                )
            };
            for j in 0..TILE {
                sum_a[j] = _mm512_dpbusd_epi32(sum_a[j], bias, y[j]);
                for r in 0..TILE {
                    acc[j][r] = _mm512_dpbusd_epi32(acc[j][r], x[r], y[j]);
                }
            }
            k += 64;
        }
        std::array::from_fn(|j| {
            std::array::from_fn(|r| reduce_i64_512(_mm512_sub_epi32(acc[j][r], sum_a[j])))
        })
    }

    /// Round half away from zero, exactly (`t = trunc(v)`, `+ sign(v)` where `|v - t| >= 0.5`).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn round_away_512(v: __m512) -> __m512i {
        let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(
            _mm512_abs_ps(_mm512_sub_ps(v, t)),
            _mm512_set1_ps(0.5),
        );
        let one = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN)),
            _mm512_castps_si512(_mm512_set1_ps(1.0)),
        ));
        _mm512_cvtps_epi32(_mm512_mask_add_ps(t, up, t, one))
    }

    pub(super) fn quantize_avx512(src: &[f32], dst: &mut [u8]) {
        super::check_len(src.len(), dst.len());
        let (d, id) = scales(src);
        dst[..HEADER].copy_from_slice(&d.to_le_bytes());
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn inner(n: usize, id: f32, src: *const f32, dst: *mut u8) {
            for k in (0..n).step_by(16) {
                // SAFETY: n is a multiple of 32, so floats k..k + 16 and bytes k..k + 16 are
                // in bounds.
                unsafe {
                    let v = _mm512_mul_ps(_mm512_loadu_ps(src.add(k)), _mm512_set1_ps(id));
                    _mm_storeu_si128(dst.add(k).cast(), _mm512_cvtsepi32_epi8(round_away_512(v)));
                }
            }
        }
        // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL; `dst` holds a header and
        // `src.len()` codes (checked above).
        unsafe { inner(src.len(), id, src.as_ptr(), dst.as_mut_ptr().add(HEADER)) }
    }

    pub(super) fn quantize_avx2(src: &[f32], dst: &mut [u8]) {
        super::check_len(src.len(), dst.len());
        let (d, id) = scales(src);
        dst[..HEADER].copy_from_slice(&d.to_le_bytes());
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn inner(n: usize, id: f32, src: *const f32, dst: *mut u8) {
            for k in (0..n).step_by(QK) {
                // SAFETY: floats k..k + 32 and bytes k..k + 32 are in bounds (n % 32 == 0).
                unsafe {
                    let q: [__m256i; 4] = std::array::from_fn(|i| {
                        let v =
                            _mm256_mul_ps(_mm256_loadu_ps(src.add(k + 8 * i)), _mm256_set1_ps(id));
                        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
                        let sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0));
                        let frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0), _mm256_sub_ps(v, t));
                        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
                        let r = _mm256_add_ps(
                            t,
                            _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0))),
                        );
                        _mm256_cvtps_epi32(r)
                    });
                    let p = _mm256_packs_epi16(
                        _mm256_packs_epi32(q[0], q[1]),
                        _mm256_packs_epi32(q[2], q[3]),
                    );
                    let p =
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                    _mm256_storeu_si256(dst.add(k).cast(), p);
                }
            }
        }
        // SAFETY: handed out only on CPUs with AVX2; `dst` holds a header and `src.len()`
        // codes (checked above).
        unsafe { inner(src.len(), id, src.as_ptr(), dst.as_mut_ptr().add(HEADER)) }
    }
}
