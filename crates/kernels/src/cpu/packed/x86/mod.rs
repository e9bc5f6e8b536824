//! x86 panel kernels (AVX2, AVX-512 VNNI) and what they share: the bounds check that makes
//! their unchecked loads sound, and the decode prefetch.

mod avx2;
mod avx512;
mod q4_k_scales;

pub(super) use avx2::panel_avx2;
pub(super) use avx512::panel_avx512;

use super::{PanelJob, MAX_ACT_ROWS};

/// How far ahead of the block being read the kernels prefetch when they read few activation
/// rows (decode): weights then stream from memory once, and the hardware prefetchers alone,
/// which stop at page boundaries, leave the memory bus idle part of the time.
const PREFETCH_BYTES: usize = 4096;

/// The kinds as `const` generic parameters of the kernels.
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;
const Q4_K: u8 = 3;
const Q6_K: u8 = 4;

/// Panics unless every byte the kernels read is in bounds.
fn check(job: &PanelJob<'_>) {
    let (nb, kind, a) = (job.nb, job.kind, job.acts);
    let rows_end = job.j0 + job.na;
    assert!(
        (1..=MAX_ACT_ROWS).contains(&job.na),
        "panel kernel: 1..=8 rows"
    );
    assert!(
        job.panel.len() >= nb * (kind.quant_bytes() + kind.scale_bytes()),
        "panel kernel: panel too short"
    );
    let block_consts = if kind.block_elems() == 256 {
        a.sub_sums.len() >= rows_end * nb * 8 && a.bsums.len() >= rows_end * nb * 16
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

/// Prefetches the cache lines of `len` bytes at `p` into L2 (any address: prefetches never
/// fault, so running past the matrix is harmless).
#[inline(always)]
fn prefetch(p: *const u8, len: usize) {
    for off in (0..len).step_by(64) {
        // SAFETY: a prefetch is a hint that reads nothing architecturally visible and never
        // faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                p.wrapping_add(off).cast(),
            )
        };
    }
}
