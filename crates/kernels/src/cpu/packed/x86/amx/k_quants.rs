//! The AMX kernel for Q4_K and Q6_K. Unpacking folds each sub-block's integer scale into its
//! weights and splits the product over two byte planes, so that one run of tile products
//! covers a whole super-block:
//!
//! - Q4_K: the 6-bit scale is split, `sc = 16 · sh + sl`; both `sl · q` (0..=225) and
//!   `sh · q` (0..=45) fit a byte, so one `i16` multiply scales a line's even and odd bytes
//!   at once: `v = sc · q = 16 · hi + lo`.
//! - Q6_K (stored quants 32 above the signed ones): `v = sc · (q − 32)` (−4064..=4096) from
//!   `maddubs`, split into its low byte (unsigned) and high byte (signed): `v = 256 · hi + lo`.
//!
//! A super-block is then 4 accumulating tile products of 64 values per plane, whose sums
//! `2^k · C_hi + C_lo = Σ v · a` are exact in `i32` (at most 3.1 · 10⁷ in size), and one
//! scaling (for Q6_K, `Σ sc·(q − 32)·a` is the spec's integer). Q4_K's minima term is an
//! integer too, `Σ_s mn[s] · sub_sum_s`, from four `vpdpwssd` a row while scaling (as a
//! third plane of tile products it would leave room for only one set of C tiles, and each
//! step would wait for the one before):
//!
//! ```text
//!   Q4_K:  t = f32(Σ sc·q·a) · d;  t = fma(f32(Σ_s mn[s] · sub_sum_s), −dmin, t)
//!   Q6_K:  t = f32(Σ sc·q·a − 32 · Σ_s sc[s] · bsum_s) · d
//!   acc = fma(t, d_a, acc)
//! ```
//!
//! where the per-sub-block kernels scale 8 or 16 sums a super-block. This is
//! `reference.rs`'s `panel_tiles_ref`, bit for bit. Two sets of C tiles take turns, so that a
//! step's products run while the step before is stored. Calls of one group of rows (batched
//! decode) stream the panel through `stream_full`; calls of more rows (prefill) run
//! `run_chunked`; both take two panels a call where they can (`run_pair`), and both are
//! built from `k_steps.rs`'s assembly, which spreads the core's work between the tile
//! products. Every group is a whole 16 rows: the rows past a job's come from the block-major
//! padding or later rows, and their results are never copied out.

use std::arch::asm;
use std::arch::x86_64::*;

use super::k_steps::{self, ScaleArgs, TileArgs};
use super::k_unpack::{unpack, Pending, Unpacked, MINS, PLANES};
use super::{configure, Layout, Sums, GROUP};
use crate::cpu::packed::layout::{Q4_K_PANEL_D, Q4_K_PANEL_DMIN, Q6_K_PANEL_D};
use crate::cpu::packed::{PackedKind, PanelJob, PanelOut, MAX_ACT_ROWS, PANEL};

/// Super-blocks unpacked at a time when many row groups share them: their planes (24 KiB)
/// stay in L1 while every group of activation rows runs over them.
const CHUNK: usize = 3;

/// [`CHUNK`] for each of two panels sharing a call ([`run_pair`]).
const PAIR_CHUNK: usize = 1;

/// Unpacked super-blocks the chunked path holds at once (its minima twice, see
/// [`run_chunked`]).
const SLOTS: usize = if CHUNK > 2 * PAIR_CHUNK {
    CHUNK
} else {
    2 * PAIR_CHUNK
};

/// The most steps of one chunk's pipeline: every group of the most rows a call has, over a
/// chunk of super-blocks.
const MAX_STEPS: usize = MAX_ACT_ROWS / GROUP * SLOTS;

/// The bytes [`run`] unpacks into: a chunk, or [`run_streaming`]'s rings.
pub(super) const BUFFER_BYTES: usize = {
    let chunk = SLOTS * (PLANES + 2 * MINS);
    let rings = PLANES + MIN_SLOTS * MINS;
    if chunk > rings {
        chunk
    } else {
        rings
    }
};

/// One 64-value step of a super-block's products, as assembly: activation tile `$a` (16
/// rows of 64 bytes in a row at `{a}`), then for each `($c, $b, $dp, $plane)` the plane's 16
/// lines into tile `$b` and `$c += $a · $b` by the instruction `$dp`.
macro_rules! chunk_of_64 {
    ($a:literal, $k:literal $(, ($c:literal, $b:literal, $dp:literal, $plane:literal))+) => {
        concat!(
            "tileloadd ", $a, ", [{a} + {line} * 1]\n",
            $(
                "tileloadd ", $b, ", [{b} + {line} * 1 + 4096 * ", $plane, " + 1024 * ", $k, "]\n",
                $dp, " ", $c, ", ", $a, ", ", $b, "\n",
            )+
        )
    };
}

/// Tile set `T` (0 or 1) computes quarter `k` (values `64k..64k + 64`) of one super-block, C
/// tiles `2T` (low plane, unsigned) and `2T + 1` (high plane: signed for Q6_K, `Q6`, unsigned
/// for Q4_K) += A (the configured rows' quarter `k`: 64 bytes a row, in a row at `a`) times
/// the planes at `b`; quarter 0 zeroes the C tiles first.
///
/// # Safety
/// The tiles are configured as [`Layout::Wide`]; the A rows and both planes are in bounds;
/// `k < 4`.
#[inline(always)]
unsafe fn compute<const T: usize, const Q6: bool>(a: *const i8, b: *const u8, k: usize) {
    macro_rules! quarter {
        ($a:literal, $k:literal, $lo:literal, $hi:literal, $hi_dp:literal $(, $zero:literal)*) => {
            asm!(
                $(concat!("tilezero ", $zero),)*
                chunk_of_64!($a, $k, ($lo, "tmm5", "tdpbsud", "0"), ($hi, "tmm6", $hi_dp, "1")),
                a = in(reg) a, b = in(reg) b, line = in(reg) 64usize,
                options(nostack, readonly),
            )
        };
    }
    macro_rules! by_quarter {
        ($lo:literal, $hi:literal, $hi_dp:literal) => {
            match k {
                0 => quarter!("tmm4", "0", $lo, $hi, $hi_dp, $lo, $hi),
                1 => quarter!("tmm7", "1", $lo, $hi, $hi_dp),
                2 => quarter!("tmm4", "2", $lo, $hi, $hi_dp),
                _ => quarter!("tmm7", "3", $lo, $hi, $hi_dp),
            }
        };
    }
    // SAFETY: the caller's contract; the tiles belong to this kernel.
    unsafe {
        match (T, Q6) {
            (0, true) => by_quarter!("tmm0", "tmm1", "tdpbssd"),
            (_, true) => by_quarter!("tmm2", "tmm3", "tdpbssd"),
            (0, false) => by_quarter!("tmm0", "tmm1", "tdpbsud"),
            (_, false) => by_quarter!("tmm2", "tmm3", "tdpbsud"),
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

/// The job's activation rows against the panel into `out`, through `buffer` (room for
/// [`BUFFER_BYTES`]).
///
/// One group of rows (at most 16: batched decode) streams over the super-blocks in one
/// pipeline that unpacks super-block `i + 1` while the tile unit multiplies super-block `i`
/// ([`stream_full`]). More rows share each unpacking ([`run_chunked`]).
///
/// # Safety
/// As `panel_amx`'s call: AMX granted and AVX-512 VNNI; the job passed the checks there.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn run(job: &PanelJob<'_>, buffer: *mut u8, out: &mut PanelOut) {
    if job.na <= GROUP {
        // SAFETY: the caller's contract.
        return unsafe { run_streaming(job, buffer, out) };
    }
    // SAFETY: the caller's contract.
    unsafe { run_chunked(&[job], buffer, &mut [out]) }
}

/// [`run`] for two panels against the same activation rows (more than [`GROUP`] of them):
/// each 16-row activation tile is multiplied by both panels' planes before the next, so the
/// second product finds it in L1 where the first loaded it from L2.
///
/// # Safety
/// As [`run`], for both jobs, which share `acts`, `j0` and `na` (`na > GROUP`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn run_pair(jobs: [&PanelJob<'_>; 2], buffer: *mut u8, outs: [&mut PanelOut; 2]) {
    let [out0, out1] = outs;
    let outs = &mut [out0, out1];
    // SAFETY: the caller's contract.
    unsafe {
        if jobs[0].na > GROUP {
            return run_chunked(&jobs, buffer, outs);
        }
        configure(Layout::Wide { rows: GROUP });
        if jobs[0].kind == PackedKind::Q6_K {
            stream_full::<true>(&jobs, buffer, outs)
        } else {
            stream_full::<false>(&jobs, buffer, outs)
        }
    }
}

/// The chunked path of [`run`] for one or two panels (`jobs`, sharing their activation rows):
/// one pipeline over every chunk of super-blocks, each unpacked for every panel just before
/// its first step, and within a chunk over every group of 16 rows (the last one padded: its
/// extra rows are computed from the block-major padding or later rows and never copied out),
/// then the chunk's super-blocks, then the panels, so that an activation tile meets each
/// panel's planes in turn. Each iteration is one [`k_steps::fused_step`]: the tile stores of
/// step `s − 2`, the products of step `s` and the scaling of step `s − 3` spread between
/// them; each row's running sum lives in its `out` row (zero before the first super-block).
///
/// A chunk's unpacking may overwrite planes that the last steps of the chunk before still
/// read: their tile loads come first in program order, so they read the old bytes. Those
/// steps' minima and weight scales are still to be scaled, so those have two sets of slots,
/// one for even chunks and one for odd.
///
/// # Safety
/// As [`run`], for each job; `jobs.len() <= 2`, the jobs' `acts`, `j0` and `na` are the
/// same, and `na > GROUP`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_chunked(jobs: &[&PanelJob<'_>], buffer: *mut u8, outs: &mut [&mut PanelOut]) {
    let job = jobs[0];
    let groups = job.na.div_ceil(GROUP);
    for out in outs.iter_mut() {
        out[..groups * GROUP].fill([0.0; PANEL]);
    }
    // SAFETY: the caller's contract.
    unsafe { configure(Layout::Wide { rows: GROUP }) };
    if job.kind == PackedKind::Q6_K {
        // SAFETY: the caller's contract.
        unsafe { run_full::<true>(jobs, buffer, groups, outs) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { run_full::<false>(jobs, buffer, groups, outs) }
    }
}

/// Minima in [`run_streaming`]'s ring: super-block `i + 1`'s are written at the start of
/// pipeline iteration `i`, which then scales step `i − 3` (reading slot `(i − 3) % 5`, not
/// `(i + 1) % 5`); step `i − 4`, the one that last used the slot, was scaled an iteration before.
///
/// The planes have a single slot: each quarter of super-block `i + 1` (Q4_K: each plane's
/// lines of a quarter) is unpacked in iteration `i` right after step `i`'s tile loads of
/// those lines were issued, which come first in
/// program order and so read the old bytes. One slot (8 KiB, where a ring of four took 33 KiB)
/// leaves L1 to the activation rows and the streaming weights: 16-row Q4_K calls ran 1.5x
/// faster for it.
const MIN_SLOTS: usize = 5;

/// [`run`] for one group of rows: super-block `i + 1` unpacked during step `i`, in pieces
/// between step `i`'s tile products ([`stream_full`]).
///
/// # Safety
/// As [`run`]; `buffer` has room for one slot of planes and [`MIN_SLOTS`] of minima;
/// `job.na <= GROUP`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_streaming(job: &PanelJob<'_>, buffer: *mut u8, out: &mut PanelOut) {
    // SAFETY: the caller's contract.
    unsafe {
        configure(Layout::Wide { rows: GROUP });
        if job.kind == PackedKind::Q6_K {
            stream_full::<true>(&[job], buffer, &mut [out])
        } else {
            stream_full::<false>(&[job], buffer, &mut [out])
        }
    }
}

/// [`run_streaming`]'s pipeline for `Q6` (Q6_K) or Q4_K, one whole group of 16 rows (the
/// rows past the job's come from the block-major padding and are never copied out): each
/// step's eight tile products are [`k_steps::stream_half`]s, each followed by its share of
/// the next super-block's unpacking (Q4_K: the low plane's lines of a quarter after the low
/// product, the high plane's after the high one; Q6_K: a quarter after the high product) and
/// carrying two rows of step `s − 3`'s scaling. Each row's running sum lives in its `out` row.
///
/// # Safety
/// As [`run_streaming`], with the tiles configured for 16 rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn stream_full<const Q6: bool>(
    jobs: &[&PanelJob<'_>],
    buffer: *mut u8,
    outs: &mut [&mut PanelOut],
) {
    let job = jobs[0];
    let (nb, acts, m) = (job.nb, job.acts, job.acts.rows);
    let steps = nb * jobs.len();
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let rings = Unpacked::at(buffer, 1);
    let slot = move |i: usize| Unpacked {
        planes: rings.planes,
        mins: rings.slot(i % MIN_SLOTS).mins,
    };
    for out in outs.iter_mut() {
        out[..GROUP].fill([0.0; PANEL]);
    }
    let out_rows: [*mut [f32; PANEL]; 2] = std::array::from_fn(|p| {
        outs.get_mut(p)
            .map_or(std::ptr::null_mut(), |o| o.as_mut_ptr())
    });
    // Step t: super-block `t % nb` of panel `t / nb`.
    let at = |t: usize| (t / nb, t % nb);
    // Step t's weight scales as `f32`, in a ring like the minima.
    let mut consts = [[_mm512_setzero_ps(); 2]; MIN_SLOTS];
    let weight_scales = |t: usize| {
        let (p, i) = at(t);
        let sp = jobs[p].panel.as_ptr().wrapping_add(nb * qb + i * sb);
        let half = |at: usize| {
            // SAFETY: super-block i's scales hold 16 `f16` at `at`.
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(at).cast())) }
        };
        if Q6 {
            [half(Q6_K_PANEL_D), _mm512_setzero_ps()]
        } else {
            let neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), half(Q4_K_PANEL_DMIN));
            [half(Q4_K_PANEL_D), neg_dmin]
        }
    };
    let mut c_buf = std::mem::MaybeUninit::<[[Sums; 2]; 2]>::uninit();
    let cp = c_buf.as_mut_ptr().cast::<[Sums; 2]>();
    let row0 = job.j0;
    // Quarter k of super-block i's 16 activation rows (see `PackedActs::q_bm`).
    let a_at = |i: usize, k: usize| {
        acts.q_bm
            .as_ptr()
            .wrapping_add(i * m * 256 + k * m * 64 + row0 * 64)
    };
    // SAFETY: super-block 0 and its slots are in bounds.
    unsafe { unpack(job, 0..1, slot(0)) };
    consts[0] = weight_scales(0);
    for s in 0..steps + 3 {
        // SAFETY: tile set s % 2 holds step s − 2's products; `cp` has room for both sets.
        unsafe {
            if (2..steps + 2).contains(&s) {
                if s.is_multiple_of(2) {
                    store::<0>(cp.add(s % 2))
                } else {
                    store::<1>(cp.add(s % 2))
                }
            }
        }
        let scale = (s >= 3).then(|| {
            let t = s - 3;
            let (p, i) = at(t);
            ScaleArgs {
                sums: cp.wrapping_add(t % 2).cast_const().cast(),
                d_a: acts.d_bm.as_ptr().wrapping_add(i * m + row0),
                out: out_rows[p].cast(),
                consts: &raw const consts[t % MIN_SLOTS],
                sub_sums: acts
                    .sub_sums_bm
                    .as_ptr()
                    .wrapping_add((i * m + row0) * 8)
                    .cast(),
                mins: slot(t).mins.cast_const().cast(),
            }
        });
        if s >= steps {
            if let Some(scale) = &scale {
                // SAFETY: as below.
                unsafe { k_steps::scale_step::<Q6>(scale) };
            }
            continue;
        }
        let next = (s + 1 < steps).then(|| {
            let (p, i) = at(s + 1);
            // SAFETY: step s + 1's super-block is the panel's; its slots are in `buffer`; the
            // planes' slot is written a quarter (plane) at a time, each after step s's tile
            // loads of it, and no step the pipeline has yet to scale reads the minima's slot
            // (`MIN_SLOTS`).
            unsafe { Pending::start(jobs[p], i, slot(s + 1)) }
        });
        if next.is_some() {
            consts[(s + 1) % MIN_SLOTS] = weight_scales(s + 1);
        }
        let b = slot(s).planes.cast_const();
        for k in 0..4 {
            let a = a_at(at(s).1, k);
            // SAFETY: the caller's contract: step s's 16 activation rows (the padding past
            // the job's), its planes, and step s − 3's sums (stored an iteration before),
            // scales and output rows are in bounds; each part of the next super-block's
            // unpacking comes after the tile loads of the lines it overwrites.
            unsafe {
                if s.is_multiple_of(2) {
                    k_steps::stream_half::<0, Q6, 0>(a, b, k, scale.as_ref());
                } else {
                    k_steps::stream_half::<1, Q6, 0>(a, b, k, scale.as_ref());
                }
                if let (Some(p), false) = (&next, Q6) {
                    p.q4_k_quarter_plane::<false>(k);
                }
                if s.is_multiple_of(2) {
                    k_steps::stream_half::<0, Q6, 1>(a, b, k, scale.as_ref());
                } else {
                    k_steps::stream_half::<1, Q6, 1>(a, b, k, scale.as_ref());
                }
                if let Some(p) = &next {
                    if Q6 {
                        p.q6_k_quarter(k)
                    } else {
                        p.q4_k_quarter_plane::<true>(k)
                    }
                }
            }
        }
    }
}

/// Where one step's operands are: step `t`'s go in `ops[t % OPS]`, written when its chunk
/// starts, while the pipeline still has the last three steps of the chunk before to finish.
const OPS: usize = MAX_STEPS + 4;

/// [`run_chunked`]'s pipeline for `Q6` (Q6_K) or Q4_K over `groups` groups of 16 rows.
///
/// # Safety
/// As [`run_chunked`], with the tiles configured for 16 rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_full<const Q6: bool>(
    jobs: &[&PanelJob<'_>],
    buffer: *mut u8,
    groups: usize,
    outs: &mut [&mut PanelOut],
) {
    let job = jobs[0];
    let (nb, acts, m, np) = (job.nb, job.acts, job.acts.rows, jobs.len());
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let per = if np == 1 { CHUNK } else { PAIR_CHUNK };
    // The planes' slots, then two sets of minima slots (even chunks, odd chunks).
    let planes = Unpacked::at(buffer, SLOTS);
    let slot = |c: usize, p: usize, n: usize| {
        let k = p * per + n;
        Unpacked {
            planes: planes.slot(k).planes,
            mins: planes.mins.wrapping_add(MINS * (SLOTS * (c % 2) + k)),
        }
    };
    // Each chunk's panels' super-blocks' weight scales as `f32` (`d`, then Q4_K's `−dmin`),
    // in two sets like the minima.
    let mut consts = [[_mm512_setzero_ps(); 2]; 2 * SLOTS];
    let mut c_buf = std::mem::MaybeUninit::<[[Sums; 2]; 2]>::uninit();
    let cp = c_buf.as_mut_ptr().cast::<[Sums; 2]>();
    let out_rows: [*mut [f32; PANEL]; 2] = std::array::from_fn(|p| {
        outs.get_mut(p)
            .map_or(std::ptr::null_mut(), |o| o.as_mut_ptr())
    });
    let mut ops: [(TileArgs, ScaleArgs); OPS] = std::array::from_fn(|_| Default::default());
    let chunks = nb.div_ceil(per);
    let mut total = 0;
    let mut chunk_end = 0;
    let mut chunk = 0;
    let mut s = 0;
    loop {
        if s == chunk_end && chunk < chunks {
            // Chunk `chunk` starts: unpack it, work out its steps' operands.
            let blocks = chunk * per..((chunk + 1) * per).min(nb);
            for (p, panel) in jobs.iter().enumerate() {
                // SAFETY: the caller's contract; the slots are in `buffer` (see above).
                unsafe {
                    for (n, i) in blocks.clone().enumerate() {
                        let pending = Pending::start(panel, i, slot(chunk, p, n));
                        for k in 0..4 {
                            pending.quarter(k);
                        }
                    }
                }
                let scales = panel.panel.as_ptr().wrapping_add(nb * qb);
                for (n, i) in blocks.clone().enumerate() {
                    let sp = scales.wrapping_add(i * sb);
                    let half = |at: usize| {
                        // SAFETY: super-block i's scales hold 16 `f16` at `at`.
                        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(at).cast())) }
                    };
                    consts[SLOTS * (chunk % 2) + p * per + n] = if Q6 {
                        [half(Q6_K_PANEL_D), _mm512_setzero_ps()]
                    } else {
                        let neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), half(Q4_K_PANEL_DMIN));
                        [half(Q4_K_PANEL_D), neg_dmin]
                    };
                }
            }
            for g in 0..groups {
                let row0 = job.j0 + GROUP * g;
                for (n, i) in blocks.clone().enumerate() {
                    let a = acts.q_bm.as_ptr().wrapping_add(i * m * 256 + row0 * 64);
                    for (p, &out) in out_rows.iter().enumerate().take(np) {
                        let t = total;
                        ops[t % OPS] = (
                            TileArgs {
                                a: std::array::from_fn(|k| a.wrapping_add(k * 64 * m)),
                                b: slot(chunk, p, n).planes.cast_const(),
                                store: cp.wrapping_add(t % 2).cast(),
                            },
                            ScaleArgs {
                                sums: cp.wrapping_add(t % 2).cast_const().cast(),
                                d_a: acts.d_bm.as_ptr().wrapping_add(i * m + row0),
                                out: out.wrapping_add(GROUP * g).cast(),
                                consts: &raw const consts[SLOTS * (chunk % 2) + p * per + n],
                                sub_sums: acts
                                    .sub_sums_bm
                                    .as_ptr()
                                    .wrapping_add((i * m + row0) * 8)
                                    .cast(),
                                mins: slot(chunk, p, n).mins.cast_const().cast(),
                            },
                        );
                        total += 1;
                    }
                }
            }
            chunk_end = total;
            chunk += 1;
        }
        if s >= total + 3 {
            break;
        }
        let (stored, started, scaled) = ((2..total + 2).contains(&s), s < total, s >= 3);
        let (tiles, scale) = (&ops[s % OPS].0, &ops[(s + OPS - 3) % OPS].1);
        // SAFETY: the caller's contract: step t's A rows (a whole group's, from the
        // block-major padding on), planes and scales are in bounds, its group's 16 `out`
        // rows are in `PanelOut`; the sums scaled were stored an iteration before; the
        // operands of steps s − 3 to s are in `ops` (a chunk's steps and three more fit).
        unsafe {
            if stored && started && scaled {
                if s.is_multiple_of(2) {
                    k_steps::fused_step::<0, Q6>(tiles, scale);
                } else {
                    k_steps::fused_step::<1, Q6>(tiles, scale);
                }
            } else {
                if stored {
                    let dst = cp.add(s % 2);
                    if s.is_multiple_of(2) {
                        store::<0>(dst)
                    } else {
                        store::<1>(dst)
                    }
                }
                if started {
                    let &TileArgs { a, b, .. } = tiles;
                    for (k, a) in a.into_iter().enumerate() {
                        if s.is_multiple_of(2) {
                            compute::<0, Q6>(a, b, k)
                        } else {
                            compute::<1, Q6>(a, b, k)
                        }
                    }
                }
                if scaled {
                    k_steps::scale_step::<Q6>(scale);
                }
            }
        }
        s += 1;
    }
}
