//! AVX-512 VNNI panel kernel: 16 weight rows (one register of lanes) × up to 8 activation
//! rows, the integer sums of a block in `NA` registers, the `f32` results in `NA` more.
//!
//! Q4_K: each 32-value sub-block is summed like a Q4_0 block and scaled in `f32` by its
//! row's `d · sc` (exact); the mins multiply the activation's sub-block sums as `i16` pairs
//! (`vpdpwssd`), four per super-block. Q6_K: each 16-value sub-block's 6-bit quants are put
//! together from their low and high bits and summed the same way, starting from `−32` times
//! the activation's sum over the sub-block (a broadcast load, [`PackedActs`]'s
//! `offset_sums`), so that the sum comes out as the signed quants' and is scaled in `f32`
//! with no step for the offset. The AMX spec's variant (`Q6_K_TILES`) takes the offset out
//! through the activation's sums times the `i8` scales instead (`vpdpwssd`, eight per
//! super-block and row). Starting from the offset rather than taking it out at the end
//! raised Q6_K from 140-141 to 159-160 GMAC/s on a Zen 4 core (`panel_kernels`, 8 to 64
//! rows, one thread; 57 to 62 at one row).
//!
//! [`PackedActs`]: crate::cpu::packed::PackedActs
//!
//! The K-quant kernels spell out their super-block loops in full, without the helpers the AVX2
//! ones share: with the end of a super-block in a helper function, prefill ran 7% slower.

use std::arch::x86_64::*;

use super::q4_k_scales::q4_k_scales;
use super::{
    check, prefetch, PREFETCH_BYTES, Q4_0, Q4_1, Q4_K, Q4_K_TILES, Q6_K, Q6_K_TILES, Q8_0,
};
use crate::cpu::packed::layout::{Q4_K_PANEL_D, Q4_K_PANEL_DMIN, Q6_K_PANEL_D};
use crate::cpu::packed::{PackedKind, PanelJob, PieceOut, PIECE_ROWS};

/// Generates the `match` from a job's row count to the monomorphized kernel.
macro_rules! by_rows {
    ($job:expr, $out:expr, $kind:expr) => {
        match $job.na {
            1 => run::<1, $kind>($job, $out),
            2 => run::<2, $kind>($job, $out),
            3 => run::<3, $kind>($job, $out),
            4 => run::<4, $kind>($job, $out),
            5 => run::<5, $kind>($job, $out),
            6 => run::<6, $kind>($job, $out),
            7 => run::<7, $kind>($job, $out),
            _ => run::<8, $kind>($job, $out),
        }
    };
}

/// The AVX-512 VNNI kernel for a piece of a job (at most [`PIECE_ROWS`] rows).
pub(super) fn piece_avx512(job: &PanelJob<'_>, out: &mut PieceOut) {
    piece::<false>(job, out)
}

/// [`piece_avx512`] with the K-quant super-blocks summed in `i32` before rounding, as the AMX
/// kernel does (`reference.rs`'s `panel_tiles_ref`): the AMX kernel's calls with few rows, so
/// that a row's result does not depend on how many rows share its call.
pub(super) fn piece_avx512_tiles(job: &PanelJob<'_>, out: &mut PieceOut) {
    piece::<true>(job, out)
}

/// [`piece_avx512`] or (`TILES`) [`piece_avx512_tiles`].
fn piece<const TILES: bool>(job: &PanelJob<'_>, out: &mut PieceOut) {
    check(job, PIECE_ROWS);
    // SAFETY: `panel_kernel` hands this out only on CPUs with AVX-512 F/BW/VL/VNNI, F16C and
    // FMA; `check` verified that the panel holds `nb` blocks and the activations hold rows
    // `j0..j0 + na` of `nb` blocks, which is all `run` reads.
    unsafe {
        match job.kind {
            PackedKind::Q4_0 => by_rows!(job, out, Q4_0),
            PackedKind::Q4_1 => by_rows!(job, out, Q4_1),
            PackedKind::Q8_0 => by_rows!(job, out, Q8_0),
            PackedKind::Q4_K if TILES => by_rows!(job, out, Q4_K_TILES),
            PackedKind::Q6_K if TILES => by_rows!(job, out, Q6_K_TILES),
            PackedKind::Q4_K => by_rows!(job, out, Q4_K),
            PackedKind::Q6_K => by_rows!(job, out, Q6_K),
        }
    }
}

/// 4 activation quants at `p`, broadcast to all 16 lanes.
///
/// # Safety
/// 4 bytes at `p` are readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn bcast4(p: *const i8) -> __m512i {
    // SAFETY: the caller's contract.
    _mm512_set1_epi32(unsafe { p.cast::<i32>().read_unaligned() })
}

/// The integer dot products of block `i` (quants at `qp`) with `NA` activation rows, added to
/// `init`.
///
/// # Safety
/// `qp` points at a block's packed quants; `aq[j]` at an activation row of at least
/// `32·(i + 1)` quants.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_sums<const NA: usize, const KIND: u8>(
    qp: *const u8,
    aq: &[*const i8; NA],
    i: usize,
    init: [__m512i; NA],
) -> [__m512i; NA] {
    let mut isum = init;
    // SAFETY: loads stay within the block's quants (4 or 8 vectors of 64 bytes) and the
    // activation block's 32 quants, per the caller's contract.
    unsafe {
        if KIND == Q8_0 {
            for g in 0..8 {
                let w = _mm512_loadu_si512(qp.add(64 * g).cast());
                for j in 0..NA {
                    let a = bcast4(aq[j].add(32 * i + 4 * g));
                    isum[j] = _mm512_dpbusd_epi32(isum[j], w, a);
                }
            }
        } else {
            let mask = _mm512_set1_epi8(0x0F);
            for v in 0..4 {
                let raw = _mm512_loadu_si512(qp.add(64 * v).cast());
                let lo = _mm512_and_si512(raw, mask);
                let hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
                for j in 0..NA {
                    let a = aq[j].add(32 * i + 8 * v);
                    isum[j] = _mm512_dpbusd_epi32(isum[j], lo, bcast4(a));
                    isum[j] = _mm512_dpbusd_epi32(isum[j], hi, bcast4(a.add(4)));
                }
            }
        }
    }
    isum
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run<const NA: usize, const KIND: u8>(job: &PanelJob<'_>, out: &mut PieceOut) {
    if KIND == Q4_K || KIND == Q4_K_TILES {
        // SAFETY: the caller's contract is `run_q4_k`'s.
        return unsafe { run_q4_k::<NA, KIND>(job, out) };
    }
    if KIND == Q6_K || KIND == Q6_K_TILES {
        // SAFETY: the caller's contract is `run_q6_k`'s.
        return unsafe { run_q6_k::<NA, KIND>(job, out) };
    }
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let quants = job.panel.as_ptr();
    // SAFETY: the scales follow the `nb` blocks of quants inside the panel (checked).
    let scales = unsafe { quants.add(nb * qb) };
    let aq: [*const i8; NA] = std::array::from_fn(|j| acts.q[(job.j0 + j) * nb * 32..].as_ptr());
    let k0: [usize; NA] = std::array::from_fn(|j| (job.j0 + j) * nb);
    let mut acc = [_mm512_setzero_ps(); NA];
    for i in 0..nb {
        // Q8_0 streams faster on the hardware prefetchers alone: on a Zen 4 core its decode
        // read 20.6-20.8 GMAC/s with the software prefetch and 23.2-23.8 without (M = 1,
        // 8192 × 3072, one thread). The AVX2 kernel, which reads a panel in halves,
        // needs it (10 GMAC/s without).
        if job.stream && KIND != Q8_0 {
            prefetch(quants.wrapping_add(i * qb + PREFETCH_BYTES), qb);
            prefetch(scales.wrapping_add(i * sb + PREFETCH_BYTES / 8), sb);
        }
        // SAFETY: block i < nb of the panel and of every activation row is in bounds.
        let (isum, dw, mw) = unsafe {
            let sp = scales.add(i * sb);
            (
                block_sums::<NA, KIND>(quants.add(i * qb), &aq, i, [_mm512_setzero_si512(); NA]),
                _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(
                    sp.add(32 * usize::from(KIND == Q4_1)).cast(),
                )),
            )
        };
        for j in 0..NA {
            let k = k0[j] + i;
            let s = if KIND == Q4_1 {
                isum[j]
            } else {
                _mm512_sub_epi32(isum[j], _mm512_set1_epi32(acts.corr[k]))
            };
            let dd = _mm512_mul_ps(dw, _mm512_set1_ps(acts.d[k]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, acc[j]);
            if KIND == Q4_1 {
                acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(acts.s[k]), acc[j]);
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: each output row holds 16 floats.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// [`run`] for a Q4_K panel: the order of operations of `reference.rs`'s `panel_q4_k_ref`,
/// or with `KIND` = `Q4_K_TILES` of its `panel_tiles_ref` (the sub-block sums times their
/// scales added in `i32`).
///
/// # Safety
/// As [`run`]: the CPU has the features enabled here, and the job passed [`check`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_q4_k<const NA: usize, const KIND: u8>(job: &PanelJob<'_>, out: &mut PieceOut) {
    let tiles = KIND == Q4_K_TILES;
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let quants = job.panel.as_ptr();
    // SAFETY: the scales follow the `nb` super-blocks of quants inside the panel (checked).
    let scales = unsafe { quants.add(nb * qb) };
    let aq: [*const i8; NA] = std::array::from_fn(|j| acts.q[(job.j0 + j) * nb * 256..].as_ptr());
    let k0: [usize; NA] = std::array::from_fn(|j| (job.j0 + j) * nb);
    let mut acc = [_mm512_setzero_ps(); NA];
    for i in 0..nb {
        if job.stream {
            prefetch(scales.wrapping_add(i * sb + PREFETCH_BYTES / 8), sb);
        }
        // SAFETY: super-block i < nb: its 256 scale bytes (192 packed, 16 f16 d, 16 f16
        // dmin) and its 8 sub-blocks of 256 quant bytes are in the panel; the activation
        // rows hold 256 quants per super-block.
        let mut t = [_mm512_setzero_ps(); NA];
        let mut ti = [_mm512_setzero_si512(); NA];
        let (ks, dw, neg_dmin) = unsafe {
            let sp = scales.add(i * sb);
            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q4_K_PANEL_DMIN).cast()));
            (
                q4_k_scales(sp),
                _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q4_K_PANEL_D).cast())),
                _mm512_sub_ps(_mm512_setzero_ps(), dmin),
            )
        };
        for s in 0..8 {
            if job.stream {
                // Spread over the sub-blocks: a burst of 32 prefetches stalls on fill buffers.
                prefetch(quants.wrapping_add(i * qb + 256 * s + PREFETCH_BYTES), 256);
            }
            let dsc = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(ks.sc[s])));
            // SAFETY: sub-block s of super-block i, laid out as a Q4_0 block, against
            // activation quants 32·(8i + s)..+32.
            let zero = [_mm512_setzero_si512(); NA];
            let isum = unsafe {
                block_sums::<NA, Q4_0>(quants.add(i * qb + 256 * s), &aq, 8 * i + s, zero)
            };
            for j in 0..NA {
                if tiles {
                    let sc = _mm512_cvtepu8_epi32(ks.sc[s]);
                    ti[j] = _mm512_add_epi32(ti[j], _mm512_mullo_epi32(isum[j], sc));
                } else {
                    t[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), dsc, t[j]);
                }
            }
        }
        if tiles {
            for j in 0..NA {
                t[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(ti[j]), dw);
            }
        }
        let mins: [__m512i; 4] = std::array::from_fn(|p| {
            let [lo, hi] = ks.mn_pairs[p];
            _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo))
        });
        for j in 0..NA {
            let k = k0[j] + i;
            let sums = acts.sub_sums[k * 8..k * 8 + 8].as_ptr();
            let mut msum = _mm512_setzero_si512();
            for (p, m) in mins.iter().enumerate() {
                // SAFETY: sub-block sums 2p and 2p + 1 of block k (8 per block, checked),
                // read as one `i32` whose halves are the two `i16`.
                let pair = unsafe { sums.add(2 * p).cast::<i32>().read_unaligned() };
                msum = _mm512_dpwssd_epi32(msum, *m, _mm512_set1_epi32(pair));
            }
            t[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), neg_dmin, t[j]);
            acc[j] = _mm512_fmadd_ps(t[j], _mm512_set1_ps(acts.d[k]), acc[j]);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: each output row holds 16 floats.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// The integer sums of one 16-value Q6_K sub-block with `NA` activation rows, from `init`:
/// half `half` of the 32-value chunk at `chunk` (nibble vectors `2·half` and `2·half + 1`,
/// high-bit vector `half`), against activation quants `e0 + 16·half..+16`.
///
/// # Safety
/// `chunk` points at a chunk's 384 packed bytes; `aq[j]` at an activation row of at least
/// `e0 + 32` quants.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6_sums<const NA: usize>(
    chunk: *const u8,
    half: usize,
    aq: &[*const i8; NA],
    e0: usize,
    init: [__m512i; NA],
) -> [__m512i; NA] {
    let (mask, top) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    let mut isum = init;
    // SAFETY: the loads stay within the chunk's 384 bytes and the activation quants
    // `e0..e0 + 32`, per the caller's contract.
    unsafe {
        let hv = _mm512_loadu_si512(chunk.add(256 + 64 * half).cast());
        for w in 0..2 {
            let v = 2 * half + w;
            let raw = _mm512_loadu_si512(chunk.add(64 * v).cast());
            // The high bits of vector v's low-nibble and high-nibble elements, moved to bits
            // 4..6 (16-bit shifts; the mask drops what crosses bytes).
            let (lo_h, hi_h) = if w == 0 {
                (_mm512_slli_epi16(hv, 4), _mm512_slli_epi16(hv, 2))
            } else {
                (hv, _mm512_srli_epi16(hv, 2))
            };
            let lo = _mm512_or_si512(_mm512_and_si512(raw, mask), _mm512_and_si512(lo_h, top));
            let hi = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask),
                _mm512_and_si512(hi_h, top),
            );
            for j in 0..NA {
                let a = aq[j].add(e0 + 8 * v);
                isum[j] = _mm512_dpbusd_epi32(isum[j], lo, bcast4(a));
                isum[j] = _mm512_dpbusd_epi32(isum[j], hi, bcast4(a.add(4)));
            }
        }
    }
    isum
}

/// [`run`] for a Q6_K panel: the order of operations of `reference.rs`'s `panel_q6_k_ref`
/// (each sub-block's sum started from the activation's offset sum), or with `KIND` =
/// `Q6_K_TILES` of its `panel_tiles_ref` (the whole super-block in `i32`, the offset taken
/// out at its end).
///
/// # Safety
/// As [`run`]: the CPU has the features enabled here, and the job passed [`check`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_q6_k<const NA: usize, const KIND: u8>(job: &PanelJob<'_>, out: &mut PieceOut) {
    let tiles = KIND == Q6_K_TILES;
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let quants = job.panel.as_ptr();
    // SAFETY: the scales follow the `nb` super-blocks of quants inside the panel (checked).
    let scales = unsafe { quants.add(nb * qb) };
    let aq: [*const i8; NA] = std::array::from_fn(|j| acts.q[(job.j0 + j) * nb * 256..].as_ptr());
    let k0: [usize; NA] = std::array::from_fn(|j| (job.j0 + j) * nb);
    let offs: [*const i32; NA] = std::array::from_fn(|j| acts.offset_sums[k0[j] * 16..].as_ptr());
    let mut acc = [_mm512_setzero_ps(); NA];
    for i in 0..nb {
        if job.stream {
            prefetch(scales.wrapping_add(i * sb + PREFETCH_BYTES / 8), sb);
        }
        let sp = scales.wrapping_add(i * sb);
        // SAFETY: super-block i < nb: its 288 scale bytes (16 × 16 i8, then 16 f16 d) are in
        // the panel.
        let (sc, d) = unsafe {
            let sc: [__m128i; 16] = std::array::from_fn(|s| _mm_loadu_si128(sp.add(16 * s).cast()));
            (
                sc,
                _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q6_K_PANEL_D).cast())),
            )
        };
        let mut t = [_mm512_setzero_ps(); NA];
        let mut ti = [_mm512_setzero_si512(); NA];
        for (s, &scale) in sc.iter().enumerate() {
            let dsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(scale)));
            let chunk = quants.wrapping_add(i * qb + 384 * (s / 2));
            if job.stream && s % 2 == 0 {
                prefetch(chunk.wrapping_add(PREFETCH_BYTES), 384);
            }
            let init = if tiles {
                [_mm512_setzero_si512(); NA]
            } else {
                // SAFETY: offset sum s of each row's block i (16 per block, checked).
                std::array::from_fn(|j| _mm512_set1_epi32(unsafe { *offs[j].add(16 * i + s) }))
            };
            // SAFETY: chunk s / 2 of super-block i, against activation quants
            // 256i + 32(s / 2)..+32.
            let isum = unsafe { q6_sums::<NA>(chunk, s % 2, &aq, 256 * i + 32 * (s / 2), init) };
            for j in 0..NA {
                if tiles {
                    let sc = _mm512_cvtepi8_epi32(scale);
                    ti[j] = _mm512_add_epi32(ti[j], _mm512_mullo_epi32(isum[j], sc));
                } else {
                    t[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), dsc, t[j]);
                }
            }
        }
        if !tiles {
            for j in 0..NA {
                acc[j] = _mm512_fmadd_ps(t[j], _mm512_set1_ps(acts.d[k0[j] + i]), acc[j]);
            }
            continue;
        }
        let pairs: [__m512i; 8] = std::array::from_fn(|p| {
            let (a, b) = (sc[2 * p], sc[2 * p + 1]);
            let bytes = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
            _mm512_cvtepi8_epi16(bytes)
        });
        for j in 0..NA {
            let k = k0[j] + i;
            let sums = acts.bsums[k * 16..k * 16 + 16].as_ptr();
            let mut csum = _mm512_setzero_si512();
            for (p, sc2) in pairs.iter().enumerate() {
                // SAFETY: sums 2p and 2p + 1 of block k (16 per block, checked), read as one
                // `i32` whose halves are the two `i16`.
                let pair = unsafe { sums.add(2 * p).cast::<i32>().read_unaligned() };
                csum = _mm512_dpwssd_epi32(csum, *sc2, _mm512_set1_epi32(pair));
            }
            let sum = _mm512_sub_epi32(ti[j], _mm512_slli_epi32(csum, 5));
            let whole = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), d);
            acc[j] = _mm512_fmadd_ps(whole, _mm512_set1_ps(acts.d[k]), acc[j]);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: each output row holds 16 floats.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}
