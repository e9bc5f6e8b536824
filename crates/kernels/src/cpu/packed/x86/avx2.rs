//! AVX2 panel kernel: a panel's 16 rows as two registers of 8 lanes (rows 0..8 and 8..16),
//! [`PASS_ROWS`] activation rows per pass so that sums, results and weights fit the 16
//! registers.
//!
//! AVX2 has no `vpdpbusd`; `maddubs` (unsigned weight byte × signed activation byte, pairs
//! summed into `i16`) followed by `madd` with ones (pairs of `i16` into `i32`) does its work:
//! - Q4_0 / Q4_1: the unsigned nibbles (0..=15) go into `maddubs` as stored. A block adds 16
//!   products into each `i16` lane, `|16 · 15 · 128| < 2^15`, so the `i16` sums of a whole
//!   block are exact and are widened once per block.
//! - Q8_0: the stored `q + 128` would overflow `maddubs`, so the kernel flips it back to the
//!   signed `q` and multiplies `|q|` by the activation carrying `q`'s sign (`2 · 128 · 127 <
//!   2^15`, activation bytes never being -128). That sum is the signed dot product itself,
//!   which equals the stored-quant sum minus the activation's offset correction, so the block
//!   correction is not applied.
//!
//! - Q4_K: each 32-value sub-block is summed as a Q4_0 block, and the widening `madd` takes
//!   the rows' sub-block scales instead of ones: the super-block adds up exactly in `i32`
//!   (`8 · 2 · 30720 · 63 < 2^31`) and is rounded once, with no `f32` step per sub-block; the
//!   mins multiply the activation's sub-block sums as `i16` pairs (`madd`).
//! - Q6_K: the 6-bit quants (0..=63) go into `maddubs` as put together; two `maddubs` add 4
//!   products (`4 · 63 · 127 < 2^15`) before each widening `madd`, which again takes the
//!   sub-block's `i8` scales. The offset of 32 comes back out through the activation's sums of
//!   16 times the scales (`madd`), in `i32` too, before the one rounding. A call of more rows
//!   than a pass first unpacks the panel ([`unpack_q6_k`]) into signed values `q − 32` and
//!   each row's offset sum `Σ_s sc[s] · Σ (q − 32)`; its passes then multiply the activations
//!   as unsigned `a + 128` (`maddubs` takes them as its unsigned operand, `4 · 255 · 32 <
//!   2^15`), which adds `128 ·` that row sum to the exact super-block sum: one subtraction per
//!   super-block instead of the activation sums' 8 `madd` per row. On a Zen 4 core
//!   (`panel_kernels`, one thread) that took Q6_K from 77 to 94 GMAC/s at 64 rows and from 75
//!   to 89 at 16.
//!
//! Results are bit-identical to the scalar specs: Q4_0, Q4_1 and Q8_0 to `panel_ref`, the
//! K-quants to `panel_tiles_ref` (the AMX kernel's), which rounds each super-block once where
//! `panel_ref` rounds each sub-block. Folding the scales into `madd` removed a conversion and
//! a multiply-add per sub-block and row: on a Zen 4 core (`panel_kernels`, 64 rows, one
//! thread) Q6_K went from 62-66 to 77-81 GMAC/s and Q4_K from 90-91 to 100-102.

use std::arch::x86_64::*;

use super::q4_k_scales::q4_k_scales;
use super::{check, prefetch, sum_pair, KRows, PREFETCH_BYTES, Q4_0, Q4_1, Q8_0};
use crate::cpu::packed::layout::{Q4_K_PANEL_D, Q4_K_PANEL_DMIN, Q6_K_PANEL_D};
use crate::cpu::packed::{
    in_pieces, PackedKind, PanelJob, PanelOut, PieceOut, MAX_ACT_ROWS, PIECE_ROWS,
};

/// Activation rows one pass over the panel handles.
const PASS_ROWS: usize = 2;

/// Integer sums of one block: `[activation row][half of the panel]`, 8 rows a register.
type Sums<const NA: usize> = [[__m256i; 2]; NA];

/// Calls `run::<NA, KIND>` for the job's kind.
macro_rules! by_kind {
    ($na:literal, $job:expr, $j:expr, $out:expr, $q6:expr) => {
        match $job.kind {
            PackedKind::Q4_0 => run::<$na, Q4_0>($job, $j, $out),
            PackedKind::Q4_1 => run::<$na, Q4_1>($job, $j, $out),
            PackedKind::Q8_0 => run::<$na, Q8_0>($job, $j, $out),
            PackedKind::Q4_K => run_q4_k::<$na>($job, $j, $out),
            PackedKind::Q6_K if $q6.is_null() => run_q6_k::<$na, false>($job, $j, $out, $q6),
            PackedKind::Q6_K => run_q6_k::<$na, true>($job, $j, $out, $q6),
        }
    };
}

/// The AVX2 kernel for a job, [`PIECE_ROWS`] rows at a time. A Q6_K job of more rows than
/// one pass unpacks its panel once for all its pieces.
pub(super) fn panel_avx2(job: &PanelJob<'_>, out: &mut PanelOut) {
    if job.kind == PackedKind::Q6_K && job.na > PASS_ROWS {
        check(job, MAX_ACT_ROWS);
        // SAFETY: the CPU has AVX2 (as below), and the job passed `check`.
        return unsafe {
            with_unpacked_q6_k(job, |q6| {
                in_pieces(job, out, |piece, o| {
                    check(piece, PIECE_ROWS);
                    passes(piece, o, q6);
                })
            })
        };
    }
    in_pieces(job, out, |piece, o| {
        check(piece, PIECE_ROWS);
        passes(piece, o, std::ptr::null());
    });
}

/// The job's rows [`PASS_ROWS`] at a time; `q6`: the panel's Q6_K quants as unpacked by
/// [`unpack_q6_k`], or null (the passes put them together themselves).
fn passes(job: &PanelJob<'_>, out: &mut PieceOut, q6: *const u8) {
    for j in (0..job.na).step_by(PASS_ROWS) {
        // SAFETY: `panel_kernel` hands this out only on CPUs with AVX2, FMA and F16C; `check`
        // verified that the panel holds `nb` blocks and the activations hold rows
        // `j0..j0 + na` of `nb` blocks; `run` reads rows `j0 + j..` up to `j0 + na`; a
        // non-null `q6` holds the panel's `nb` unpacked super-blocks.
        unsafe {
            if job.na - j >= 2 {
                by_kind!(2, job, j, out, q6)
            } else {
                by_kind!(1, job, j, out, q6)
            }
        }
    }
}

/// Where an unpacked Q6_K super-block keeps its rows' offset sums (16 × `i32`), after its 8
/// chunks of 32 values × 16 rows.
const Q6_ROW_SUMS: usize = 8 * 512;

/// Bytes of one unpacked Q6_K super-block.
const Q6_UNPACKED_BYTES: usize = Q6_ROW_SUMS + 64;

std::thread_local! {
    /// The panel being multiplied, its Q6_K quants unpacked once for all the passes of a call
    /// (each pass would otherwise put the 6-bit values together again for its 2 rows).
    static Q6_UNPACKED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on the job's Q6_K panel as [`unpack_q6_k`] writes it, in this thread's buffer.
///
/// # Safety
/// The CPU has AVX2; the job passed [`check`].
unsafe fn with_unpacked_q6_k<R>(job: &PanelJob<'_>, f: impl FnOnce(*const u8) -> R) -> R {
    Q6_UNPACKED.with_borrow_mut(|buf| {
        buf.resize(job.nb * Q6_UNPACKED_BYTES, 0);
        // SAFETY: the caller's contract; `buf` has room for the `nb` unpacked super-blocks.
        unsafe { unpack_q6_k(job, buf.as_mut_ptr()) };
        f(buf.as_ptr())
    })
}

/// Writes the panel's Q6_K quants at `dst` as signed bytes `q − 32` (-32..=31), per
/// super-block [`Q6_UNPACKED_BYTES`]: per chunk, per nibble vector `v` of its 4, the vector's
/// low-nibble elements (64 bytes) then its high-nibble elements, in the packed vectors' order
/// of rows and values (so sub-block `s` is 4 vectors of 4 values at byte `256s`); then at
/// [`Q6_ROW_SUMS`] each row's `Σ_s sc[s] · Σ (q − 32)` as `i32` (`|·| ≤ 16 · 128 · 512`).
///
/// # Safety
/// The CPU has AVX2; the job passed [`check`]; `dst` has room for `nb` ×
/// [`Q6_UNPACKED_BYTES`] bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_q6_k(job: &PanelJob<'_>, dst: *mut u8) {
    for i in 0..job.nb {
        // SAFETY: the caller's contract; super-block i's record is in `dst`'s room.
        unsafe { unpack_q6_k_super_block(job, i, dst.add(i * Q6_UNPACKED_BYTES)) };
    }
}

/// Super-block `i` of the panel as [`unpack_q6_k`] writes it, at `rec`.
///
/// # Safety
/// The CPU has AVX2; the job passed [`check`] and `i < nb`; `rec` has room for
/// [`Q6_UNPACKED_BYTES`] bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_q6_k_super_block(job: &PanelJob<'_>, i: usize, rec: *mut u8) {
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let quants = job.panel.as_ptr().wrapping_add(i * qb);
    let scales = job.panel.as_ptr().wrapping_add(job.nb * qb + i * sb);
    let (offset, ones) = (_mm256_set1_epi8(32), _mm256_set1_epi8(1));
    let mut sums = [_mm256_setzero_si256(); 2];
    for s in 0..16 {
        let (c, half) = (s / 2, s % 2);
        // SAFETY: chunk c of super-block i (< nb, checked) and its 16 scales of sub-block s
        // are in the panel; the unpacked bytes at `rec` are in the caller's room.
        unsafe {
            let sc = _mm_loadu_si128(scales.add(16 * s).cast());
            let [lo, hi] = q6_vectors(quants.add(384 * c), half);
            let mut s16 = [_mm256_setzero_si256(); 2];
            for w in 0..2 {
                let at = rec.add(512 * c + 128 * (2 * half + w));
                for h in 0..2 {
                    let l = _mm256_sub_epi8(lo[w][h], offset);
                    let u = _mm256_sub_epi8(hi[w][h], offset);
                    _mm256_storeu_si256(at.add(32 * h).cast(), l);
                    _mm256_storeu_si256(at.add(64 + 32 * h).cast(), u);
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(ones, l),
                        _mm256_maddubs_epi16(ones, u),
                    );
                    s16[h] = _mm256_add_epi16(s16[h], p);
                }
            }
            let wide = scale_pairs::<true>(sc);
            for h in 0..2 {
                sums[h] = _mm256_add_epi32(sums[h], _mm256_madd_epi16(s16[h], wide[h]));
            }
        }
    }
    for (h, sum) in sums.iter().enumerate() {
        // SAFETY: the row sums' 64 bytes end the record.
        unsafe { _mm256_storeu_si256(rec.add(Q6_ROW_SUMS + 32 * h).cast(), *sum) };
    }
}

/// The 6-bit values of half `half` of the chunk at `chunk`: for each of its two nibble
/// vectors `w` (vector `2·half + w`), the low-nibble and the high-nibble elements with their
/// high bits, as the two 32-byte halves of the panel's rows.
///
/// # Safety
/// The CPU has AVX2; `chunk` points at a chunk's 384 packed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_vectors(chunk: *const u8, half: usize) -> [[[__m256i; 2]; 2]; 2] {
    let (mask, top) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let mut lo = [[_mm256_setzero_si256(); 2]; 2];
    let mut hi = lo;
    // SAFETY: the loads stay within the chunk's 384 bytes, per the caller's contract.
    unsafe {
        let hv = halves(chunk.add(256 + 64 * half));
        for w in 0..2 {
            let raw = halves(chunk.add(64 * (2 * half + w)));
            for h in 0..2 {
                // The high bits of the low-nibble and high-nibble elements, moved to bits
                // 4..6 (16-bit shifts; the mask drops what crosses bytes).
                let (lo_h, hi_h) = if w == 0 {
                    (_mm256_slli_epi16(hv[h], 4), _mm256_slli_epi16(hv[h], 2))
                } else {
                    (hv[h], _mm256_srli_epi16(hv[h], 2))
                };
                lo[w][h] =
                    _mm256_or_si256(_mm256_and_si256(raw[h], mask), _mm256_and_si256(lo_h, top));
                hi[w][h] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(raw[h], 4), mask),
                    _mm256_and_si256(hi_h, top),
                );
            }
        }
    }
    [lo, hi]
}

/// 4 activation quants at `p`, broadcast to all 8 lanes.
///
/// # Safety
/// 4 bytes at `p` are readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bcast4(p: *const i8) -> __m256i {
    // SAFETY: the caller's contract.
    _mm256_set1_epi32(unsafe { p.cast::<i32>().read_unaligned() })
}

/// The two 32-byte halves (rows 0..8, 8..16) of the 64-byte vector at `p`.
///
/// # Safety
/// 64 bytes at `p` are readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn halves(p: *const u8) -> [__m256i; 2] {
    // SAFETY: the caller's contract.
    unsafe {
        [
            _mm256_loadu_si256(p.cast()),
            _mm256_loadu_si256(p.add(32).cast()),
        ]
    }
}

/// Adds block `i` of a Q4 panel (quants at `qp`) times `NA` activation rows into `s32`: each
/// row's `i16` sums of the block's 16 products a lane, widened by `madd` with `wide` (ones, or
/// a Q4_K sub-block's scales as [`scale_pairs`] spreads them).
///
/// # Safety
/// `qp` points at a block's 256 packed quant bytes; `aq[j]` at an activation row of at least
/// `32·(i + 1)` quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_sums<const NA: usize>(
    qp: *const u8,
    aq: &[*const i8; NA],
    i: usize,
    wide: Halves<__m256i>,
    s32: &mut Sums<NA>,
) {
    let mask = _mm256_set1_epi8(0x0F);
    let mut s16 = [[_mm256_setzero_si256(); 2]; NA];
    for v in 0..4 {
        // SAFETY: vector v of the block's 4, and activation quants 8v..8v+8 of block i.
        unsafe {
            let raw = halves(qp.add(64 * v));
            let lo = raw.map(|x| _mm256_and_si256(x, mask));
            let hi = raw.map(|x| _mm256_and_si256(_mm256_srli_epi16(x, 4), mask));
            for j in 0..NA {
                let a = aq[j].add(32 * i + 8 * v);
                let (al, ah) = (bcast4(a), bcast4(a.add(4)));
                for h in 0..2 {
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo[h], al),
                        _mm256_maddubs_epi16(hi[h], ah),
                    );
                    s16[j][h] = _mm256_add_epi16(s16[j][h], p);
                }
            }
        }
    }
    for j in 0..NA {
        for h in 0..2 {
            s32[j][h] = _mm256_add_epi32(s32[j][h], _mm256_madd_epi16(s16[j][h], wide[h]));
        }
    }
}

/// A K-quant sub-block's scales, one byte a panel row in `sc` (unsigned for Q4_K, signed for
/// Q6_K), as the `madd` operand that widens and scales the rows' `i16` sums at once: half `h`
/// holds rows `8h..8h + 8`, each row's scale in both of its `i16` lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_pairs<const SIGNED: bool>(sc: __m128i) -> Halves<__m256i> {
    [_mm_unpacklo_epi8(sc, sc), _mm_unpackhi_epi8(sc, sc)].map(|x| {
        if SIGNED {
            _mm256_cvtepi8_epi16(x)
        } else {
            _mm256_cvtepu8_epi16(x)
        }
    })
}

/// The signed `i32` sums of block `i` of a Q8_0 panel (quants at `qp`, stored `q + 128`) with
/// `NA` activation rows.
///
/// # Safety
/// `qp` points at a block's 512 packed quant bytes; `aq[j]` at an activation row of at least
/// `32·(i + 1)` quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_sums<const NA: usize>(qp: *const u8, aq: &[*const i8; NA], i: usize) -> Sums<NA> {
    let (flip, ones) = (_mm256_set1_epi8(-128), _mm256_set1_epi16(1));
    let mut s32 = [[_mm256_setzero_si256(); 2]; NA];
    for g in 0..8 {
        // SAFETY: vector g of the block's 8, and activation quants 4g..4g+4 of block i.
        unsafe {
            let q = halves(qp.add(64 * g)).map(|x| _mm256_xor_si256(x, flip));
            let abs = q.map(|x| _mm256_abs_epi8(x));
            for j in 0..NA {
                let a = bcast4(aq[j].add(32 * i + 4 * g));
                for h in 0..2 {
                    let p = _mm256_maddubs_epi16(abs[h], _mm256_sign_epi8(a, q[h]));
                    s32[j][h] = _mm256_add_epi32(s32[j][h], _mm256_madd_epi16(p, ones));
                }
            }
        }
    }
    s32
}

/// Activation rows `job.j0 + j .. + NA` against the job's panel, into `out[j..j + NA]`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; the job passed [`check`] and `j + NA <= job.na`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<const NA: usize, const KIND: u8>(job: &PanelJob<'_>, j: usize, out: &mut PieceOut) {
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let quants = job.panel.as_ptr();
    // SAFETY: the scales follow the `nb` blocks of quants inside the panel (checked).
    let scales = unsafe { quants.add(nb * qb) };
    let row = |t: usize| job.j0 + j + t;
    let aq: [*const i8; NA] = std::array::from_fn(|t| acts.q[row(t) * nb * 32..].as_ptr());
    let k0: [usize; NA] = std::array::from_fn(|t| row(t) * nb);
    let mut acc = [[_mm256_setzero_ps(); 2]; NA];
    for i in 0..nb {
        if job.stream {
            prefetch(quants.wrapping_add(i * qb + PREFETCH_BYTES), qb);
            prefetch(scales.wrapping_add(i * sb + PREFETCH_BYTES / 8), sb);
        }
        // SAFETY: block i < nb of the panel and of every activation row is in bounds; the
        // block's scales are 16 f16 d (then 16 f16 m for Q4_1).
        let (isum, dw, mw) = unsafe {
            let sp = scales.add(i * sb);
            let f16x8 = |o: usize| _mm256_cvtph_ps(_mm_loadu_si128(sp.add(o).cast()));
            let sums = if KIND == Q8_0 {
                q8_sums::<NA>(quants.add(i * qb), &aq, i)
            } else {
                let mut s32 = [[_mm256_setzero_si256(); 2]; NA];
                let ones = [_mm256_set1_epi16(1); 2];
                q4_sums::<NA>(quants.add(i * qb), &aq, i, ones, &mut s32);
                s32
            };
            let m = if KIND == Q4_1 {
                [f16x8(32), f16x8(48)]
            } else {
                [_mm256_setzero_ps(); 2]
            };
            (sums, [f16x8(0), f16x8(16)], m)
        };
        for t in 0..NA {
            let k = k0[t] + i;
            let da = _mm256_set1_ps(acts.d[k]);
            for h in 0..2 {
                let s = if KIND == Q4_0 {
                    _mm256_sub_epi32(isum[t][h], _mm256_set1_epi32(acts.corr[k]))
                } else {
                    isum[t][h]
                };
                let dd = _mm256_mul_ps(dw[h], da);
                acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, acc[t][h]);
                if KIND == Q4_1 {
                    acc[t][h] = _mm256_fmadd_ps(mw[h], _mm256_set1_ps(acts.s[k]), acc[t][h]);
                }
            }
        }
    }
    store(&acc, j, out);
}

/// Rows 0..8 and 8..16 of a panel, one register each.
type Halves<T> = [T; 2];

/// Per activation row `u` and half: `Σ_p pairs[p] · (sums 2p, 2p + 1 of the row's block
/// k(u))` in `i32` (`sums` holds `2P` per block): the share of a super-block's minimums (Q4_K)
/// or offsets (Q6_K).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_dots<const NA: usize, const P: usize>(
    pairs: &[Halves<__m256i>; P],
    sums: &[i16],
    k: impl Fn(usize) -> usize,
) -> Sums<NA> {
    let mut dots = [[_mm256_setzero_si256(); 2]; NA];
    for (u, dot) in dots.iter_mut().enumerate() {
        let row_sums = &sums[k(u) * 2 * P..][..2 * P];
        for (p, w) in pairs.iter().enumerate() {
            let a = _mm256_set1_epi32(sum_pair(row_sums, p));
            for h in 0..2 {
                dot[h] = _mm256_add_epi32(dot[h], _mm256_madd_epi16(w[h], a));
            }
        }
    }
    dots
}

/// Stores the 16 results of activation rows `j..j + NA`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn store<const NA: usize>(acc: &[Halves<__m256>; NA], j: usize, out: &mut PieceOut) {
    for (u, halves) in acc.iter().enumerate() {
        for (h, a) in halves.iter().enumerate() {
            // SAFETY: each output row holds 16 floats; half h is floats 8h..8h+8.
            unsafe { _mm256_storeu_ps(out[j + u][8 * h..].as_mut_ptr(), *a) };
        }
    }
}

/// [`run`] for a Q4_K panel, in the order of operations of `reference.rs`'s
/// `panel_tiles_ref`: each sub-block's scale widens its `i16` sums (`madd`), so a super-block
/// is summed exactly in `i32` and rounded once.
///
/// # Safety
/// As [`run`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q4_k<const NA: usize>(job: &PanelJob<'_>, j: usize, out: &mut PieceOut) {
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let KRows {
        quants,
        scales,
        aq,
        k0,
    } = KRows::<NA>::new(job, job.j0 + j);
    let mut acc = [[_mm256_setzero_ps(); 2]; NA];
    for i in 0..nb {
        if job.stream {
            prefetch(scales.wrapping_add(i * sb + PREFETCH_BYTES / 8), sb);
        }
        // SAFETY: super-block i < nb: its 256 scale bytes (192 packed, 16 f16 d, 16 f16
        // dmin) are in the panel.
        let (ks, dw, neg_dmin) = unsafe {
            let sp = scales.add(i * sb);
            let f16x8 = |o: usize| _mm256_cvtph_ps(_mm_loadu_si128(sp.add(o).cast()));
            let neg = |o: usize| _mm256_sub_ps(_mm256_setzero_ps(), f16x8(o));
            (
                q4_k_scales(sp),
                [f16x8(Q4_K_PANEL_D), f16x8(Q4_K_PANEL_D + 16)],
                [neg(Q4_K_PANEL_DMIN), neg(Q4_K_PANEL_DMIN + 16)],
            )
        };
        let mut isum = [[_mm256_setzero_si256(); 2]; NA];
        for s in 0..8 {
            let qp = quants.wrapping_add(i * qb + 256 * s);
            if job.stream {
                // Spread over the sub-blocks: a burst of 32 prefetches stalls on fill buffers.
                prefetch(qp.wrapping_add(PREFETCH_BYTES), 256);
            }
            let wide = scale_pairs::<false>(ks.sc[s]);
            // SAFETY: sub-block s of super-block i (< nb, checked), laid out as a Q4_0 block,
            // against activation quants 32·(8i + s)..+32.
            unsafe { q4_sums::<NA>(qp, &aq, 8 * i + s, wide, &mut isum) };
        }
        let mins: [Halves<__m256i>; 4] =
            std::array::from_fn(|p| ks.mn_pairs[p].map(|x| _mm256_cvtepu8_epi16(x)));
        let msum = pair_dots::<NA, 4>(&mins, &acts.sub_sums, |u| k0[u] + i);
        for u in 0..NA {
            let da = _mm256_set1_ps(acts.d[k0[u] + i]);
            for h in 0..2 {
                let t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[u][h]), dw[h]);
                let t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum[u][h]), neg_dmin[h], t);
                acc[u][h] = _mm256_fmadd_ps(t, da, acc[u][h]);
            }
        }
    }
    store(&acc, j, out);
}

/// Adds one 16-value Q6_K sub-block times `NA` activation rows into `s32`, its rows' scales
/// widening the `i16` sums (`wide`, from [`scale_pairs`]): half `half` of the 32-value chunk
/// at `chunk` (nibble vectors `2·half` and `2·half + 1`, high-bit vector `half`), against
/// activation quants `e0 + 16·half..+16`. `UNPACKED`: the values are read from `unpacked`
/// instead (the chunk's 512 bytes as [`unpack_q6_k`] wrote them, signed) and the activations
/// are the unsigned `a + 128`.
///
/// # Safety
/// `chunk` points at a chunk's 384 packed bytes, or (`UNPACKED`) `unpacked` at its 512
/// unpacked ones; `aq[j]` at an activation row of at least `e0 + 32` quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_sums<const NA: usize, const UNPACKED: bool>(
    (chunk, unpacked): (*const u8, *const u8),
    half: usize,
    (aq, e0): (&[*const i8; NA], usize),
    wide: Halves<__m256i>,
    s32: &mut Sums<NA>,
) {
    // SAFETY: the loads stay within the chunk's bytes (packed or unpacked) and the activation
    // quants `e0..e0 + 32`, per the caller's contract.
    unsafe {
        let [lo, hi] = if UNPACKED {
            let at = |w: usize, k: usize| halves(unpacked.add(128 * (2 * half + w) + 64 * k));
            [[at(0, 0), at(1, 0)], [at(0, 1), at(1, 1)]]
        } else {
            q6_vectors(chunk, half)
        };
        // `maddubs` takes its first operand unsigned.
        let product = |w: __m256i, a: __m256i| {
            if UNPACKED {
                _mm256_maddubs_epi16(a, w)
            } else {
                _mm256_maddubs_epi16(w, a)
            }
        };
        for w in 0..2 {
            let a = aq.map(|p| p.add(e0 + 8 * (2 * half + w)));
            for h in 0..2 {
                for j in 0..NA {
                    let p = _mm256_add_epi16(
                        product(lo[w][h], bcast4(a[j])),
                        product(hi[w][h], bcast4(a[j].add(4))),
                    );
                    s32[j][h] = _mm256_add_epi32(s32[j][h], _mm256_madd_epi16(p, wide[h]));
                }
            }
        }
    }
}

/// [`run`] for a Q6_K panel, in the order of operations of `reference.rs`'s `panel_tiles_ref`
/// (each sub-block's scale widens its sums; a super-block is summed in `i32`, offsets
/// included, and rounded once). `UNPACKED`: the quants come from `unpacked`, the panel as
/// [`unpack_q6_k`] wrote it, against the unsigned activations, and the offset from its row
/// sums.
///
/// # Safety
/// As [`run`]; with `UNPACKED`, `unpacked` holds the panel's `nb` super-blocks as
/// [`unpack_q6_k`] writes them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q6_k<const NA: usize, const UNPACKED: bool>(
    job: &PanelJob<'_>,
    j: usize,
    out: &mut PieceOut,
    unpacked: *const u8,
) {
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let a = if UNPACKED { &acts.qu } else { &acts.q };
    let KRows {
        quants,
        scales,
        aq,
        k0,
    } = KRows::<NA>::over(job, job.j0 + j, a);
    let mut acc = [[_mm256_setzero_ps(); 2]; NA];
    for i in 0..nb {
        if job.stream {
            prefetch(scales.wrapping_add(i * sb + PREFETCH_BYTES / 8), sb);
        }
        let sp = scales.wrapping_add(i * sb);
        // SAFETY: super-block i < nb: its 288 scale bytes (16 × 16 i8, then 16 f16 d) are in
        // the panel.
        let (sc, d) = unsafe {
            let sc: [__m128i; 16] = std::array::from_fn(|s| _mm_loadu_si128(sp.add(16 * s).cast()));
            let f16x8 = |o: usize| _mm256_cvtph_ps(_mm_loadu_si128(sp.add(o).cast()));
            (sc, [f16x8(Q6_K_PANEL_D), f16x8(Q6_K_PANEL_D + 16)])
        };
        let rec = unpacked.wrapping_add(i * Q6_UNPACKED_BYTES);
        let mut isum = [[_mm256_setzero_si256(); 2]; NA];
        for (s, &scale) in sc.iter().enumerate() {
            let chunk = quants.wrapping_add(i * qb + 384 * (s / 2));
            if !UNPACKED && job.na <= 2 && s % 2 == 0 {
                prefetch(chunk.wrapping_add(PREFETCH_BYTES), 384);
            }
            let wide = scale_pairs::<true>(scale);
            let rows = (&aq, 256 * i + 32 * (s / 2));
            // SAFETY: chunk s / 2 of super-block i (< nb, checked), packed and (`UNPACKED`)
            // unpacked, against activation quants 256i + 32(s / 2)..+32.
            unsafe {
                let up = rec.wrapping_add(512 * (s / 2));
                q6_sums::<NA, UNPACKED>((chunk, up), s % 2, rows, wide, &mut isum);
            }
        }
        // The offset's share, times 32 or (unsigned activations) 128: per activation row the
        // activation's sums times the scales, or per panel row its unpacked row sum.
        let offset: Sums<NA> = if UNPACKED {
            // SAFETY: the super-block's row sums end its unpacked record.
            let rs = unsafe { halves(rec.add(Q6_ROW_SUMS)) };
            [rs.map(|x| _mm256_slli_epi32(x, 7)); NA]
        } else {
            // Scales 2p and 2p + 1 of each row as an `i16` pair.
            let pairs: [Halves<__m256i>; 8] = std::array::from_fn(|p| {
                let (a, b) = (sc[2 * p], sc[2 * p + 1]);
                [_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b)].map(|x| _mm256_cvtepi8_epi16(x))
            });
            pair_dots::<NA, 8>(&pairs, &acts.bsums, |u| k0[u] + i)
                .map(|c| c.map(|x| _mm256_slli_epi32(x, 5)))
        };
        for u in 0..NA {
            let da = _mm256_set1_ps(acts.d[k0[u] + i]);
            for h in 0..2 {
                let sum = _mm256_sub_epi32(isum[u][h], offset[u][h]);
                let t = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), d[h]);
                acc[u][h] = _mm256_fmadd_ps(t, da, acc[u][h]);
            }
        }
    }
    store(&acc, j, out);
}
