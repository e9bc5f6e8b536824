//! AMX panel kernel: the integer sums of up to 16 activation rows against a panel's 16 rows
//! come out of tile products (`tdpbssd`/`tdpbsud`: signed activation bytes times signed or
//! unsigned weight bytes), and AVX-512 scales them.
//!
//! A tile product's B operand holds, per 64-byte line, 4 consecutive elements of each of 16
//! weight rows: the layout of a packed Q8_0 block. Each call unpacks the panel into B lines
//! once (the panel's bytes, a few times over, stay in L2), then each group of 16 activation
//! rows runs over them in a pipeline (see [`pipeline`]):
//!
//! - Q4_0, Q4_1, Q8_0 (`blocks.rs`): one product per 32-value block, scaled by the block's
//!   `f32` scales exactly as the VNNI kernels do: bit-identical to `reference.rs`'s
//!   `panel_ref`.
//! - Q4_K, Q6_K (`k_quants.rs`): the sub-block scales are folded into the unpacked weights
//!   (`sc · q`, split into a low and a high byte plane), so one pair of accumulating products
//!   per 64 values covers a whole super-block, summed exactly in `i32` and scaled once:
//!   bit-identical to `reference.rs`'s `panel_tiles_ref`.
//!
//! Calls with few activation rows (decoding one to three sequences) go to the VNNI kernel on
//! the same spec (a tile product's fixed cost buys little there), so a row's result never
//! depends on how many rows share its call.

pub(crate) mod bf16;
mod blocks;
mod k_quants;
mod k_steps;
mod k_unpack;
mod private_pages;

use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::{Cell, RefCell};
use std::ops::Range;

use super::check;
use crate::cpu::packed::acts::BLOCK_MAJOR_PAD;
use crate::cpu::packed::{PackedKind, PanelJob, PanelOut, MAX_ACT_ROWS, PANEL};
use private_pages::PrivatePages;

/// Activation rows per tile product (a tile's rows).
const GROUP: usize = 16;

/// Calls with fewer activation rows run the AVX-512 VNNI kernel.
pub(in crate::cpu::packed) const MIN_ROWS: usize = 4;

/// Runs `$body` for `$r` = 0..16 ([`GROUP`]), spelled out, so that arrays indexed by `$r`
/// (the accumulators) stay in registers.
macro_rules! each_row {
    ($r:ident => $body:block) => {
        each_row!(@ $r $body; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $r:ident $body:block; $($n:literal)*) => {
        $({
            let $r: usize = $n;
            $body
        })*
    };
}
use each_row;

/// One C tile's results: 16 rows of 16 `i32`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Sums([[i32; PANEL]; GROUP]);

/// The tile layouts the kernels configure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// None loaded yet.
    None,
    /// `blocks.rs`: C in tmm0/tmm1, A (32 bytes a row) in tmm2/tmm3, B (8 lines) in tmm4/tmm5.
    Blocks { rows: usize },
    /// `k_quants.rs`: C in tmm0-tmm3, A (64 bytes a row) in tmm4/tmm7, B (16 lines) in
    /// tmm5/tmm6.
    Wide { rows: usize },
    /// `bf16.rs`: every tile 16 rows of 64 bytes (C in tmm0-tmm3, A in tmm4/tmm5, B in
    /// tmm6/tmm7).
    Bf16,
}

thread_local! {
    /// Each thread's unpacked panel (B lines).
    static UNPACKED: RefCell<PrivatePages> = const { RefCell::new(PrivatePages::new()) };
    /// The tile layout this thread loaded last (loading one is slow, and it stays with the
    /// thread).
    static CONFIG: Cell<Layout> = const { Cell::new(Layout::None) };
}

/// The AMX [`crate::cpu::packed::PanelFn`].
pub(in crate::cpu::packed) fn panel_amx(job: &PanelJob<'_>, out: &mut PanelOut) {
    if job.na < MIN_ROWS {
        return super::panel_avx512_tiles(job, out);
    }
    check_tiles(job);
    let nb = job.nb;
    UNPACKED.with_borrow_mut(|pages| {
        if job.kind.block_elems() == 256 {
            let buffer = pages.get(k_quants::BUFFER_BYTES).as_mut_ptr();
            // SAFETY: `panel_kernel` hands this kernel out only where `Isa::tiles` holds (AMX
            // granted, AVX-512 VNNI); `check` verified the panel's `nb` super-blocks and
            // activation rows `j0..j0 + na`, the assertion the block-major scales of those
            // rows plus the padding; `buffer` holds `BUFFER_BYTES` from a page boundary.
            unsafe { k_quants::run(job, buffer, out) };
            return;
        }
        let b = pages.get(nb * 8 * 64).as_mut_ptr();
        // SAFETY: as above; `b` holds 8 lines of 64 bytes a block, from a page boundary.
        unsafe { blocks::unpack(job, b) };
        for g0 in (0..job.na).step_by(GROUP) {
            let rows = (job.na - g0).min(GROUP);
            // SAFETY: as above; `b` holds the unpacked panel.
            unsafe { blocks::run(job, b, g0, rows, &mut out[g0..g0 + rows]) };
        }
    });
}

/// Two panels against the same activation rows, each in its `outs`, when the K-quant kernel
/// takes them in one call (Q4_K or Q6_K, at least [`MIN_ROWS`] rows): with more than one
/// tile of rows every activation tile is shared between them, with one the streaming
/// pipeline runs on from the first panel into the second; `false` (nothing done) otherwise.
pub(in crate::cpu::packed) fn panel_pair_amx(
    jobs: [&PanelJob<'_>; 2],
    outs: [&mut PanelOut; 2],
) -> bool {
    let [a, b] = jobs;
    if a.kind.block_elems() != 256 || a.na < MIN_ROWS {
        return false;
    }
    assert!(
        std::ptr::eq(a.acts, b.acts) && (a.kind, a.nb, a.j0, a.na) == (b.kind, b.nb, b.j0, b.na),
        "AMX panel pair: the panels must share their activation rows"
    );
    check_tiles(a);
    check_tiles(b);
    UNPACKED.with_borrow_mut(|pages| {
        let buffer = pages.get(k_quants::BUFFER_BYTES).as_mut_ptr();
        // SAFETY: as in `panel_amx`, for both jobs (checked above), which share their rows.
        unsafe { k_quants::run_pair(jobs, buffer, outs) };
    });
    true
}

/// The checks that make a tile kernel call sound: the job's bounds ([`check`]) and its
/// block-major activation constants.
fn check_tiles(job: &PanelJob<'_>) {
    check(job, MAX_ACT_ROWS);
    let (acts, nb) = (job.acts, job.nb);
    let bm_len = nb * acts.rows + BLOCK_MAJOR_PAD;
    // The K-quant kernel reads whole groups of 16 rows.
    let q_pad = if job.kind.block_elems() == 256 {
        BLOCK_MAJOR_PAD * 64
    } else {
        0
    };
    assert!(
        acts.rows >= job.j0 + job.na
            && acts.q_bm.len() >= nb * acts.rows * job.kind.block_elems() + q_pad
            && acts.d_bm.len() >= bm_len
            && (job.kind != PackedKind::Q4_1 || acts.s_bm.len() >= bm_len)
            && (job.kind != PackedKind::Q4_K || acts.sub_sums_bm.len() >= 8 * bm_len),
        "AMX panel kernel: block-major constants too short"
    );
}

/// Loads `layout` into the tile configuration, unless the thread has it already.
///
/// # Safety
/// The CPU has AMX and the process was granted the tile state.
unsafe fn configure(layout: Layout) {
    if CONFIG.get() == layout {
        return;
    }
    CONFIG.set(layout);
    // (rows, bytes a row) of tmm0..tmm7.
    let shapes: [(usize, usize); 8] = match layout {
        Layout::None => return,
        Layout::Blocks { rows } => {
            let (c, a, b) = ((rows, 64), (rows, 32), (8, 64));
            [c, c, a, a, b, b, (0, 0), (0, 0)]
        }
        Layout::Wide { rows } => {
            let (c, b) = ((rows, 64), (16, 64));
            [c, c, c, c, c, b, b, c]
        }
        Layout::Bf16 => [(16, 64); 8],
    };
    #[repr(C, align(64))]
    struct TileConfig([u8; 64]);
    let mut cfg = TileConfig([0; 64]);
    cfg.0[0] = 1; // palette 1
    for (t, (rows, colsb)) in shapes.into_iter().enumerate() {
        cfg.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&(colsb as u16).to_le_bytes());
        cfg.0[48 + t] = rows as u8;
    }
    // SAFETY: `cfg` is a valid palette-1 configuration (at most 16 rows of at most 64 bytes);
    // the caller's contract covers the instruction.
    unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
}

/// Runs `steps` steps of three stages: `compute(s)` starts step `s`'s tile products (in tile
/// set `s % 2` with `SETS` = 2), `store(s)` stores its C tiles (into buffer `s % 2`),
/// `scale(s)` scales the stored sums; `after(s)` ends iteration `s` (for `s < steps`), work
/// for the core while the tile unit runs step `s`'s products.
///
/// The stages are spread over iterations so that none waits on the one before: iteration `s`
/// stores step `s − SETS` (with two tile sets its products are long done), starts step `s`,
/// and scales step `s − SETS − 1`, whose sums were stored an iteration earlier. A tile store
/// right behind its product, or loads right behind a tile store, stall the core.
#[inline(always)]
fn pipeline<const SETS: usize>(
    steps: usize,
    mut compute: impl FnMut(usize),
    mut store: impl FnMut(usize),
    mut scale: impl FnMut(usize),
    mut after: impl FnMut(usize),
) {
    for s in 0..steps + SETS + 1 {
        if (SETS..steps + SETS).contains(&s) {
            store(s - SETS);
        }
        if s < steps {
            compute(s);
        }
        if s > SETS {
            scale(s - SETS - 1);
        }
        if s < steps {
            after(s);
        }
    }
}

/// Stores rows `part` of `acc` that `out` has.
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn store_rows(acc: &[__m512; GROUP], out: &mut [[f32; PANEL]], part: Range<usize>) {
    // Constant indices only, so that `acc` stays in registers.
    each_row!(r => {
        if r < out.len() && part.contains(&r) {
            // SAFETY: each output row holds 16 floats.
            unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
        }
    });
}
