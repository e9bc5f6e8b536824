//! x86 panel kernels (AVX2, AVX-512 VNNI) and what they share: the bounds check that makes
//! their unchecked loads sound, and the decode prefetch.

pub(crate) mod amx;
mod avx2;
mod avx512;
pub(crate) mod avx512_bf16;
mod q4_k_scales;

pub(super) use amx::{panel_amx, panel_pair_amx, MIN_ROWS as TILE_MIN_ROWS};

use super::{in_pieces, PackedKind, PanelJob, PanelOut};

/// The AVX2 [`super::PanelFn`].
pub(super) fn panel_avx2(job: &PanelJob<'_>, out: &mut PanelOut) {
    avx2::panel_avx2(job, out);
}

/// The AVX-512 VNNI [`super::PanelFn`].
pub(super) fn panel_avx512(job: &PanelJob<'_>, out: &mut PanelOut) {
    in_pieces(job, out, avx512::piece_avx512);
}

/// [`panel_avx512`] on the AMX kernel's spec: its calls with few rows.
fn panel_avx512_tiles(job: &PanelJob<'_>, out: &mut PanelOut) {
    in_pieces(job, out, avx512::piece_avx512_tiles);
}
/// Panel bytes ahead go to L2 (any address: running past the matrix is harmless).
use crate::cpu::prefetch::to_l2 as prefetch;

/// How far ahead of the block being read the register kernels (AVX2, AVX-512) prefetch on a
/// call that reads the panel from memory ([`PanelJob::stream`]): weights then stream once, and
/// the hardware prefetchers alone, which stop at page boundaries, leave the memory bus idle
/// part of the time. Decode, where these calls have one or a few rows, consumes weights
/// fastest. On a 2-core Zen 4 host, 24 KiB ahead against 4 KiB raised 1.1B-shape decode from
/// 47-49 to 51-54 tokens/s (Q4_0) and from 40-45 to 45-48 (Q4_K_M); 64 KiB against 24 KiB
/// then raised one thread's 1.1B Q4_K_M decode from 28.7 to 30.8-31.1 tokens/s and the
/// 3B-shape Q4_K_M decode's median of six alternating rounds from 15.1-16.3 to 17.6-18.6
/// (1.1B on two threads: level within the host's spread; 128 KiB: no further gain).
const PREFETCH_BYTES: usize = 64 * 1024;

/// The AMX kernel's distance: its streaming calls are prefill chunks, which read weights far
/// slower than they compute on them (tuned on a Xeon with AMX).
const TILE_PREFETCH_BYTES: usize = 4096;

/// The kinds as `const` generic parameters of the kernels.
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;
const Q4_K: u8 = 3;
const Q6_K: u8 = 4;
/// Q4_K and Q6_K with whole super-blocks summed in `i32` (the AMX kernel's spec).
const Q4_K_TILES: u8 = 5;
const Q6_K_TILES: u8 = 6;

/// Panics unless the job has 1 to `max_rows` rows and every byte the kernels read is in
/// bounds.
fn check(job: &PanelJob<'_>, max_rows: usize) {
    let (nb, kind, a) = (job.nb, job.kind, job.acts);
    let rows_end = job.j0 + job.na;
    assert!(
        (1..=max_rows).contains(&job.na),
        "panel kernel: 1..={max_rows} rows"
    );
    assert!(
        job.panel.len() >= nb * (kind.quant_bytes() + kind.scale_bytes()),
        "panel kernel: panel too short"
    );
    let block_consts = if kind.block_elems() == 256 {
        let q6 = usize::from(kind == PackedKind::Q6_K);
        a.sub_sums.len() >= rows_end * nb * 8
            && a.bsums.len() >= rows_end * nb * 16
            && a.qu.len() >= q6 * rows_end * nb * 256
            && a.offset_sums.len() >= q6 * rows_end * nb * 16
    } else {
        a.corr.len() >= rows_end * nb && a.s.len() >= rows_end * nb
    };
    assert!(
        a.q.len() >= rows_end * nb * kind.block_elems()
            && a.d.len() >= rows_end * nb
            && block_consts,
        "panel kernel: activations too short"
    );
}

/// What a K-quant kernel reads through for activation rows `first..first + NA`.
struct KRows<const NA: usize> {
    /// The panel's quants (`nb` super-blocks of them), then its scales.
    quants: *const u8,
    scales: *const u8,
    /// Each activation row's quants.
    aq: [*const i8; NA],
    /// Each activation row's first block index (into `d`, and times 8 or 16 into the sums).
    k0: [usize; NA],
}

impl<const NA: usize> KRows<NA> {
    fn new(job: &PanelJob<'_>, first: usize) -> Self {
        Self::over(job, first, &job.acts.q)
    }

    /// [`KRows::new`] with the activation quants read from `q` (the job's `q` or `qu`).
    fn over(job: &PanelJob<'_>, first: usize, q: &[i8]) -> Self {
        let nb = job.nb;
        let quants = job.panel.as_ptr();
        KRows {
            quants,
            scales: quants.wrapping_add(nb * job.kind.quant_bytes()),
            aq: std::array::from_fn(|t| q[(first + t) * nb * 256..].as_ptr()),
            k0: std::array::from_fn(|t| (first + t) * nb),
        }
    }
}

/// Sums `2p` and `2p + 1` of `sums` as one `i32`, low half first: the activation operand of an
/// `i16` pair dot product.
#[inline(always)]
fn sum_pair(sums: &[i16], p: usize) -> i32 {
    (sums[2 * p] as u16 as u32 | (sums[2 * p + 1] as u16 as u32) << 16) as i32
}
