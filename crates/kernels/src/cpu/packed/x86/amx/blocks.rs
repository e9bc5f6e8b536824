//! The AMX kernel for the 32-value block kinds (Q4_0, Q4_1, Q8_0): one tile product per block
//! and group of activation rows, each scaled by the block's `f32` scales as the VNNI kernel
//! does (`fma(f32(sum), d_w · d_a, acc)`, then Q4_1's `fma(m_w, s_a, acc)`).

use std::arch::asm;
use std::arch::x86_64::*;

use super::{configure, each_row, pipeline, store_rows, Layout, Sums, GROUP};
use crate::cpu::packed::x86::{prefetch, TILE_PREFETCH_BYTES};
use crate::cpu::packed::{PackedKind, PanelJob, PANEL};

/// Tile set `T` (0 or 1) computes A · B: A the configured rows of 32 activation bytes at `a`
/// (`a_stride` apart), B the block's 8 lines at `b` (signed bytes if `SIGNED`, else unsigned).
///
/// # Safety
/// The tiles are configured as [`Layout::Blocks`]; the A rows and B lines are in bounds.
#[inline(always)]
unsafe fn compute<const T: usize, const SIGNED: bool>(a: *const i8, a_stride: usize, b: *const u8) {
    macro_rules! tiles {
        ($dp:literal, $c:literal, $a:literal, $b:literal) => {
            asm!(
                concat!("tileloadd ", $a, ", [{a} + {sa} * 1]"),
                concat!("tileloadd ", $b, ", [{b} + {line} * 1]"),
                concat!("tilezero ", $c),
                concat!($dp, " ", $c, ", ", $a, ", ", $b),
                a = in(reg) a, sa = in(reg) a_stride, b = in(reg) b,
                line = in(reg) 64usize, options(nostack, readonly),
            )
        };
    }
    // SAFETY: the caller's contract; the tiles belong to this kernel.
    unsafe {
        match (T, SIGNED) {
            (0, true) => tiles!("tdpbssd", "tmm0", "tmm2", "tmm4"),
            (0, false) => tiles!("tdpbsud", "tmm0", "tmm2", "tmm4"),
            (_, true) => tiles!("tdpbssd", "tmm1", "tmm3", "tmm5"),
            (_, false) => tiles!("tdpbsud", "tmm1", "tmm3", "tmm5"),
        }
    }
}

/// Stores tile set `T`'s C tile at `c`.
///
/// # Safety
/// The tiles are configured as [`Layout::Blocks`].
#[inline(always)]
unsafe fn store<const T: usize>(c: *mut Sums) {
    // SAFETY: the caller's contract; `c` holds 16 rows of 64 bytes.
    unsafe {
        if T == 0 {
            asm!("tilestored [{c} + {line} * 1], tmm0", c = in(reg) c, line = in(reg) 64usize, options(nostack));
        } else {
            asm!("tilestored [{c} + {line} * 1], tmm1", c = in(reg) c, line = in(reg) 64usize, options(nostack));
        }
    }
}

/// The panel's quants as B lines at `dst` (line `g`: elements `4g..4g + 4` of each row). Q4_0
/// and Q8_0 come out signed (their offset taken off, so the products need no correction),
/// Q4_1 unsigned as stored.
///
/// # Safety
/// The CPU has AVX-512 BW; the panel holds `nb` blocks (checked); `dst` has room for `8 · nb`
/// lines.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn unpack(job: &PanelJob<'_>, dst: *mut u8) {
    let quants = job.panel.as_ptr();
    let bytes = job.nb * job.kind.quant_bytes();
    let mask = _mm512_set1_epi8(0x0F);
    let offset = _mm512_set1_epi8(job.kind.offset() as i8);
    for v in 0..bytes / 64 {
        if job.stream {
            prefetch(quants.wrapping_add(64 * v + TILE_PREFETCH_BYTES), 64);
        }
        // SAFETY: the loads stay within the panel's `bytes` quant bytes, the stores within the
        // lines (one per Q8_0 line, two per 64 nibble bytes).
        unsafe {
            let raw = _mm512_loadu_si512(quants.add(64 * v).cast());
            if job.kind == PackedKind::Q8_0 {
                // q + 128 back to q: flip the top bit.
                _mm512_store_si512(dst.add(64 * v).cast(), _mm512_xor_si512(raw, offset));
            } else {
                let lo = _mm512_sub_epi8(_mm512_and_si512(raw, mask), offset);
                let hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
                _mm512_store_si512(dst.add(128 * v).cast(), lo);
                _mm512_store_si512(dst.add(128 * v + 64).cast(), _mm512_sub_epi8(hi, offset));
            }
        }
    }
}

/// Activation rows `j0 + g0..+rows` against the panel's B lines at `b` into `out`.
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
        match job.kind {
            PackedKind::Q4_1 => run_kind::<true, false>(job, b, g0, rows, out),
            _ => run_kind::<false, true>(job, b, g0, rows, out),
        }
    }
}

/// [`run`] for Q4_1 (`MIN`, unsigned B lines) or Q4_0 / Q8_0 (`SIGNED` B lines).
///
/// # Safety
/// As [`run`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_kind<const MIN: bool, const SIGNED: bool>(
    job: &PanelJob<'_>,
    b: *const u8,
    g0: usize,
    rows: usize,
    out: &mut [[f32; PANEL]],
) {
    let (nb, acts, m) = (job.nb, job.acts, job.acts.rows);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let row0 = job.j0 + g0;
    // SAFETY: the panel's scales follow its `nb` blocks of quants; the activation rows and the
    // block-major constants from `row0` on are in bounds (the caller's contract).
    let (scales, a, d_bm, s_bm) = unsafe {
        (
            job.panel.as_ptr().add(nb * qb),
            acts.q_bm.as_ptr().add(row0 * 32),
            acts.d_bm.as_ptr().add(row0),
            acts.s_bm.as_ptr().wrapping_add(row0),
        )
    };
    let mut c = [Sums([[0; PANEL]; GROUP]); 2];
    let cp = c.as_mut_ptr();
    let mut acc = [_mm512_setzero_ps(); GROUP];
    let compute_step = |i: usize| {
        let (ai, bi) = (a.wrapping_add(32 * m * i), b.wrapping_add(512 * i));
        // SAFETY: block i < nb: the group's rows of it (block-major, 32 bytes a row), 8 B
        // lines.
        unsafe {
            if i.is_multiple_of(2) {
                compute::<0, SIGNED>(ai, 32, bi)
            } else {
                compute::<1, SIGNED>(ai, 32, bi)
            }
        }
    };
    let store_step = |i: usize| {
        // SAFETY: `cp` points at the two sum buffers; block i's products were started.
        unsafe {
            if i.is_multiple_of(2) {
                store::<0>(cp)
            } else {
                store::<1>(cp.add(1))
            }
        }
    };
    let scale_step = |i: usize| {
        // SAFETY: block i's scales; 16 block-major constants of block i from `row0` on; the
        // sums of block i were stored into buffer i % 2 an iteration before.
        unsafe {
            let sums = &(*cp.add(i % 2)).0;
            let sp = scales.add(i * sb);
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast()));
            let di = d_bm.add(i * m);
            each_row!(r => {
                let sum = _mm512_load_si512(sums[r].as_ptr().cast());
                let dd = _mm512_mul_ps(dw, _mm512_set1_ps(*di.add(r)));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), dd, acc[r]);
            });
            if MIN {
                let mw = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(32).cast()));
                let si = s_bm.add(i * m);
                each_row!(r => {
                    acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(*si.add(r)), acc[r]);
                });
            }
        }
    };
    // SAFETY: the caller's contract.
    unsafe {
        configure(Layout::Blocks { rows });
        pipeline::<2>(nb, compute_step, store_step, scale_step, |_| {});
        store_rows(&acc, out, 0..GROUP);
    }
}
