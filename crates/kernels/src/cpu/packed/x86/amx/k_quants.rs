//! The AMX kernel for Q4_K and Q6_K. Unpacking folds each sub-block's integer scale into its
//! weights, `v = sc · q` (Q4_K: 0..=945; Q6_K: −8064..=8001, the stored quants being 32 above
//! the signed ones), and splits it into two byte planes, `v = 64 · hi + lo` with `lo` in
//! 0..64. A super-block is then 4 × 2 accumulating tile products of 64 values, whose sums
//! `64 · C_hi + C_lo = Σ sc · q · a` are exact in `i32` (at most 2.7 · 10⁸), and one scaling:
//!
//! ```text
//!   Q4_K:  t = f32(Σ sc·q·a) · d;  t = fma(f32(Σ_s mn[s] · sub_sum_s), −dmin, t)
//!   Q6_K:  t = f32(Σ sc·q·a − 32 · Σ_s sc[s] · bsum_s) · d
//!   acc = fma(t, d_a, acc)
//! ```
//!
//! where the per-sub-block kernels scale 8 or 16 sums a super-block. This is
//! `reference.rs`'s `panel_tiles_ref`, bit for bit.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{configure, each_row, pipeline, store_rows, Layout, Sums, GROUP};
use crate::cpu::packed::layout::{Q4_K_PANEL_D, Q4_K_PANEL_DMIN, Q6_K_PANEL_D};
use crate::cpu::packed::x86::q4_k_scales::q4_k_scales;
use crate::cpu::packed::x86::{prefetch, sum_pair, PREFETCH_BYTES};
use crate::cpu::packed::{PackedKind, PanelJob, PANEL};

/// Bytes of one super-block's unpacked planes (64 lines each).
const PLANES: usize = 2 * 64 * 64;

/// Tile set `T` (0 or 1) computes one super-block: C tiles `2T` (low plane) and `2T + 1`
/// (high plane, signed bytes if `HI_SIGNED`) = A (the configured rows of 256 activation bytes
/// at `a`, `a_stride` apart) times the planes at `b`, 64 values a product.
///
/// # Safety
/// The tiles are configured as [`Layout::Wide`]; the A rows and both planes are in bounds.
#[inline(always)]
unsafe fn compute<const T: usize, const HI_SIGNED: bool>(
    a: *const i8,
    a_stride: usize,
    b: *const u8,
) {
    macro_rules! super_block {
        ($lo:literal, $hi:literal, $dp_hi:literal) => {
            asm!(
                concat!("tilezero ", $lo),
                concat!("tilezero ", $hi),
                "tileloadd tmm4, [{a} + {sa} * 1]",
                "tileloadd tmm5, [{b} + {line} * 1]",
                concat!("tdpbsud ", $lo, ", tmm4, tmm5"),
                "tileloadd tmm6, [{b} + {line} * 1 + 4096]",
                concat!($dp_hi, " ", $hi, ", tmm4, tmm6"),
                "tileloadd tmm7, [{a} + {sa} * 1 + 64]",
                "tileloadd tmm5, [{b} + {line} * 1 + 1024]",
                concat!("tdpbsud ", $lo, ", tmm7, tmm5"),
                "tileloadd tmm6, [{b} + {line} * 1 + 5120]",
                concat!($dp_hi, " ", $hi, ", tmm7, tmm6"),
                "tileloadd tmm4, [{a} + {sa} * 1 + 128]",
                "tileloadd tmm5, [{b} + {line} * 1 + 2048]",
                concat!("tdpbsud ", $lo, ", tmm4, tmm5"),
                "tileloadd tmm6, [{b} + {line} * 1 + 6144]",
                concat!($dp_hi, " ", $hi, ", tmm4, tmm6"),
                "tileloadd tmm7, [{a} + {sa} * 1 + 192]",
                "tileloadd tmm5, [{b} + {line} * 1 + 3072]",
                concat!("tdpbsud ", $lo, ", tmm7, tmm5"),
                "tileloadd tmm6, [{b} + {line} * 1 + 7168]",
                concat!($dp_hi, " ", $hi, ", tmm7, tmm6"),
                a = in(reg) a, sa = in(reg) a_stride, b = in(reg) b,
                line = in(reg) 64usize, options(nostack, readonly),
            )
        };
    }
    // SAFETY: the caller's contract; the tiles belong to this kernel.
    unsafe {
        match (T, HI_SIGNED) {
            (0, true) => super_block!("tmm0", "tmm1", "tdpbssd"),
            (0, false) => super_block!("tmm0", "tmm1", "tdpbsud"),
            (_, true) => super_block!("tmm2", "tmm3", "tdpbssd"),
            (_, false) => super_block!("tmm2", "tmm3", "tdpbsud"),
        }
    }
}

/// Stores tile set `T`'s two C tiles at `c` (low plane's sums, then the high plane's).
///
/// # Safety
/// The tiles are configured as [`Layout::Wide`].
#[inline(always)]
unsafe fn store<const T: usize>(c: *mut [Sums; 2]) {
    let (lo, hi) = (c.cast::<Sums>(), c.cast::<Sums>().wrapping_add(1));
    // SAFETY: the caller's contract; `c` holds two 16-row buffers of 64-byte rows.
    unsafe {
        if T == 0 {
            asm!(
                "tilestored [{lo} + {line} * 1], tmm0",
                "tilestored [{hi} + {line} * 1], tmm1",
                lo = in(reg) lo, hi = in(reg) hi, line = in(reg) 64usize, options(nostack),
            );
        } else {
            asm!(
                "tilestored [{lo} + {line} * 1], tmm2",
                "tilestored [{hi} + {line} * 1], tmm3",
                lo = in(reg) lo, hi = in(reg) hi, line = in(reg) 64usize, options(nostack),
            );
        }
    }
}

/// A sub-block's scales (byte `r` = row `r`'s) as the even and odd byte operands of
/// `maddubs`: row `r`'s 4 bytes `[sc, 0, sc, 0]` and `[0, sc, 0, sc]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn scale_pairs(sc: __m128i) -> (__m512i, __m512i) {
    let z = _mm512_cvtepu8_epi32(sc);
    let even = _mm512_or_si512(z, _mm512_slli_epi32(z, 16));
    (even, _mm512_slli_epi32(even, 8))
}

/// Line `x` of unsigned quants times its rows' scales, as the low and high byte planes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn split(x: __m512i, (se, so): (__m512i, __m512i)) -> (__m512i, __m512i) {
    // The products of the even and odd bytes as `i16` lanes (one factor is 0 in each pair).
    let (ve, vo) = (_mm512_maddubs_epi16(x, se), _mm512_maddubs_epi16(x, so));
    let (m63, m255) = (_mm512_set1_epi16(0x3F), _mm512_set1_epi16(0xFF));
    let lo = _mm512_or_si512(
        _mm512_and_si512(ve, m63),
        _mm512_slli_epi16(_mm512_and_si512(vo, m63), 8),
    );
    let hi = _mm512_or_si512(
        _mm512_and_si512(_mm512_srai_epi16(ve, 6), m255),
        _mm512_slli_epi16(_mm512_srai_epi16(vo, 6), 8),
    );
    (lo, hi)
}

/// The panel's super-blocks as scaled byte planes at `dst`: super-block `i` at `PLANES · i`,
/// its low plane's line `g` (elements `4g..4g + 4` of each row) at `64 g`, the high plane's at
/// `4096 + 64 g`.
///
/// # Safety
/// The CPU has AVX-512 BW; the panel holds `nb` super-blocks (checked); `dst` has room for
/// `nb · PLANES` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn unpack(job: &PanelJob<'_>, dst: *mut u8) {
    let (nb, qb, sb) = (job.nb, job.kind.quant_bytes(), job.kind.scale_bytes());
    let quants = job.panel.as_ptr();
    let scales = quants.wrapping_add(nb * qb);
    let (mask, top) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    for i in 0..nb {
        let (qp, sp, d) = (
            quants.wrapping_add(i * qb),
            scales.wrapping_add(i * sb),
            dst.wrapping_add(PLANES * i),
        );
        if job.stream {
            prefetch(qp.wrapping_add(PREFETCH_BYTES), qb);
        }
        // Stores lines `g` and `g + 1` of both planes.
        let put = |g: usize, x0: __m512i, x1: __m512i, pairs: (__m512i, __m512i)| {
            let ((lo0, hi0), (lo1, hi1)) = (split(x0, pairs), split(x1, pairs));
            // SAFETY: g + 1 < 64: within super-block i's planes.
            unsafe {
                _mm512_store_si512(d.add(64 * g).cast(), lo0);
                _mm512_store_si512(d.add(64 * g + 64).cast(), lo1);
                _mm512_store_si512(d.add(4096 + 64 * g).cast(), hi0);
                _mm512_store_si512(d.add(4096 + 64 * g + 64).cast(), hi1);
            }
        };
        // SAFETY: super-block i's quant and scale bytes are in the panel (the caller's
        // contract); the loads below stay within them.
        unsafe {
            if job.kind == PackedKind::Q4_K {
                let sc = q4_k_scales(sp).sc;
                for (s, &scale) in sc.iter().enumerate() {
                    let pairs = scale_pairs(scale);
                    for v in 0..4 {
                        let raw = _mm512_loadu_si512(qp.add(256 * s + 64 * v).cast());
                        let hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
                        put(8 * s + 2 * v, _mm512_and_si512(raw, mask), hi, pairs);
                    }
                }
            } else {
                for s in 0..16 {
                    let pairs = scale_pairs(_mm_loadu_si128(sp.add(16 * s).cast()));
                    let (c, h) = (s / 2, s % 2);
                    let chunk = qp.add(384 * c);
                    // The high bits of nibble vectors 2h and 2h + 1 (see `layout.rs`).
                    let hv = _mm512_loadu_si512(chunk.add(256 + 64 * h).cast());
                    for w in 0..2 {
                        let v = 2 * h + w;
                        let (lo_h, hi_h) = if w == 0 {
                            (_mm512_slli_epi16(hv, 4), _mm512_slli_epi16(hv, 2))
                        } else {
                            (hv, _mm512_srli_epi16(hv, 2))
                        };
                        let raw = _mm512_loadu_si512(chunk.add(64 * v).cast());
                        let x0 = _mm512_or_si512(
                            _mm512_and_si512(raw, mask),
                            _mm512_and_si512(lo_h, top),
                        );
                        let x1 = _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask),
                            _mm512_and_si512(hi_h, top),
                        );
                        put(8 * c + 2 * v, x0, x1, pairs);
                    }
                }
            }
        }
    }
}

/// Activation rows `j0 + g0..+rows` against the panel's planes at `b` into `out`.
///
/// # Safety
/// As `panel_amx`'s call: AMX granted and AVX-512 VNNI; the job passed the checks there; `b`
/// holds the unpacked panel.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn run(
    job: &PanelJob<'_>,
    b: *const u8,
    g0: usize,
    rows: usize,
    out: &mut [[f32; PANEL]],
) {
    // SAFETY: the caller's contract.
    unsafe {
        if job.kind == PackedKind::Q6_K {
            run_kind::<true>(job, b, g0, rows, out)
        } else {
            run_kind::<false>(job, b, g0, rows, out)
        }
    }
}

/// [`run`] for Q6_K (`Q6`) or Q4_K.
///
/// # Safety
/// As [`run`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_kind<const Q6: bool>(
    job: &PanelJob<'_>,
    b: *const u8,
    g0: usize,
    rows: usize,
    out: &mut [[f32; PANEL]],
) {
    let (nb, acts, m) = (job.nb, job.acts, job.acts.rows);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let row0 = job.j0 + g0;
    // SAFETY: the panel's scales follow its `nb` super-blocks of quants; the activation rows
    // and the block-major scales from `row0` on are in bounds (the caller's contract).
    let (scales, a, d_bm) = unsafe {
        (
            job.panel.as_ptr().add(nb * qb),
            acts.q.as_ptr().add(row0 * nb * 256),
            acts.d_bm.as_ptr().add(row0),
        )
    };
    let mut c = [[Sums([[0; PANEL]; GROUP]); 2]; 2];
    let cp = c.as_mut_ptr();
    let mut acc = [_mm512_setzero_ps(); GROUP];
    let compute_step = |i: usize| {
        let (ai, bi) = (a.wrapping_add(256 * i), b.wrapping_add(PLANES * i));
        // SAFETY: super-block i < nb: 256 activation bytes per row, both planes.
        unsafe {
            if i.is_multiple_of(2) {
                compute::<0, Q6>(ai, nb * 256, bi)
            } else {
                compute::<1, Q6>(ai, nb * 256, bi)
            }
        }
    };
    let store_step = |i: usize| {
        // SAFETY: `cp` points at the two pairs of sum buffers; super-block i was started.
        unsafe {
            if i.is_multiple_of(2) {
                store::<0>(cp)
            } else {
                store::<1>(cp.add(1))
            }
        }
    };
    let scale_step = |i: usize| {
        let sp = scales.wrapping_add(i * sb);
        // SAFETY: super-block i's scales and the activations' sums and block-major scales of
        // rows `row0..row0 + rows`; its tile sums were stored an iteration before.
        unsafe {
            let [lo, hi] = &*cp.add(i % 2);
            let di = d_bm.add(i * m);
            if Q6 {
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q6_K_PANEL_D).cast()));
                let csum = q6_k_offsets(job, sp, row0, i, rows);
                each_row!(r => {
                    let sum = plane_sum(&lo.0[r], &hi.0[r]);
                    let sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(csum[r], 5));
                    let t = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), d);
                    acc[r] = _mm512_fmadd_ps(t, _mm512_set1_ps(*di.add(r)), acc[r]);
                });
            } else {
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q4_K_PANEL_D).cast()));
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q4_K_PANEL_DMIN).cast()));
                let neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), dmin);
                let msum = q4_k_mins(job, sp, row0, i, rows);
                each_row!(r => {
                    let sum = plane_sum(&lo.0[r], &hi.0[r]);
                    let t = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), d);
                    let t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum[r]), neg_dmin, t);
                    acc[r] = _mm512_fmadd_ps(t, _mm512_set1_ps(*di.add(r)), acc[r]);
                });
            }
        }
    };
    // SAFETY: the caller's contract.
    unsafe {
        configure(Layout::Wide { rows });
        pipeline(nb, compute_step, store_step, scale_step);
        store_rows(&acc, out);
    }
}

/// `64 · hi + lo`: a row's sums of the two planes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn plane_sum(lo: &[i32; PANEL], hi: &[i32; PANEL]) -> __m512i {
    // SAFETY: 16 `i32` each, 64-byte aligned (rows of `Sums`).
    unsafe {
        let (lo, hi) = (
            _mm512_load_si512(lo.as_ptr().cast()),
            _mm512_load_si512(hi.as_ptr().cast()),
        );
        _mm512_add_epi32(_mm512_slli_epi32(hi, 6), lo)
    }
}

/// Q4_K super-block `i`'s minimum sums (scales at `sp`) for activation rows
/// `row0..row0 + rows`: `Σ_s mn[s] · sub_sum_s` per row (zero past `rows`).
///
/// # Safety
/// AVX-512 VNNI; the super-block's scale bytes at `sp`; the activation rows are in bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_k_mins(
    job: &PanelJob<'_>,
    sp: *const u8,
    row0: usize,
    i: usize,
    rows: usize,
) -> [__m512i; GROUP] {
    let (nb, acts) = (job.nb, job.acts);
    // SAFETY: the caller's contract.
    let ks = unsafe { q4_k_scales(sp) };
    let mins: [__m512i; 4] = std::array::from_fn(|p| {
        let [lo, hi] = ks.mn_pairs[p];
        _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo))
    });
    let mut out = [_mm512_setzero_si512(); GROUP];
    for (r, o) in out.iter_mut().enumerate().take(rows) {
        let k = (row0 + r) * nb + i;
        let sums = &acts.sub_sums[k * 8..k * 8 + 8];
        for (p, mn) in mins.iter().enumerate() {
            *o = _mm512_dpwssd_epi32(*o, *mn, _mm512_set1_epi32(sum_pair(sums, p)));
        }
    }
    out
}

/// Q6_K super-block `i`'s offset sums (scales at `sp`) for activation rows
/// `row0..row0 + rows`: `Σ_s sc[s] · bsum_s` per row (zero past `rows`).
///
/// # Safety
/// AVX-512 VNNI; the super-block's scale bytes at `sp`; the activation rows are in bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6_k_offsets(
    job: &PanelJob<'_>,
    sp: *const u8,
    row0: usize,
    i: usize,
    rows: usize,
) -> [__m512i; GROUP] {
    let (nb, acts) = (job.nb, job.acts);
    // SAFETY: the caller's contract: 16 loads of 16 bytes within the super-block's scales.
    let sc: [__m128i; 16] =
        std::array::from_fn(|s| unsafe { _mm_loadu_si128(sp.add(16 * s).cast()) });
    let pairs: [__m512i; 8] = std::array::from_fn(|p| {
        let (x, y) = (sc[2 * p], sc[2 * p + 1]);
        let bytes = _mm256_set_m128i(_mm_unpackhi_epi8(x, y), _mm_unpacklo_epi8(x, y));
        _mm512_cvtepi8_epi16(bytes)
    });
    let mut out = [_mm512_setzero_si512(); GROUP];
    for (r, o) in out.iter_mut().enumerate().take(rows) {
        let k = (row0 + r) * nb + i;
        let sums = &acts.bsums[k * 16..k * 16 + 16];
        for (p, sc2) in pairs.iter().enumerate() {
            *o = _mm512_dpwssd_epi32(*o, *sc2, _mm512_set1_epi32(sum_pair(sums, p)));
        }
    }
    out
}
