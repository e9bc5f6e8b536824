//! AMX panel kernel: the integer block sums of up to 16 activation rows against a panel's 16
//! rows come out of one tile product (`tdpbsud`: signed activation bytes times the panel's
//! unsigned quants, as `vpdpbusd` takes them), and AVX-512 scales them with the `f32`
//! operations of the VNNI kernels in the same order, so results are bit-identical to the spec.
//!
//! A tile product's B operand holds, per 64-byte line, 4 consecutive elements of each of 16
//! weight rows: the layout of a packed Q8_0 block, which the kernel reads in place. The 4- and
//! 6-bit kinds are unpacked into it once per call (the panel's `cols · 16` bytes, which stay
//! in L2), then each group of 16 activation rows runs over the blocks:
//!
//! ```text
//!   for each block (sub-block for the K-quants) i:
//!     C (rows × 16 i32) = A (rows × K activation quants) · B_i (K/4 lines)    [tile unit]
//!     for each row r:  y[r] (16 lanes) += f32(C[r] − corr) · d_w · d_a[r]    [AVX-512]
//! ```
//!
//! Two sets of tiles alternate, so the product of block `i + 1` runs while block `i` is scaled.
//! Calls with few activation rows (decoding one or two sequences) go to the VNNI kernel: there
//! a tile product's fixed cost buys little.

use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::{Cell, RefCell};

use super::q4_k_scales::q4_k_scales;
use super::{check, prefetch, PREFETCH_BYTES};
use crate::cpu::packed::acts::BLOCK_MAJOR_PAD;
use crate::cpu::packed::layout::{Q4_K_PANEL_D, Q4_K_PANEL_DMIN, Q6_K_PANEL_D};
use crate::cpu::packed::{PackedKind, PanelJob, PanelOut, MAX_ACT_ROWS, PANEL};

/// Activation rows per tile product (a tile's rows).
const GROUP: usize = 16;

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

/// Calls with fewer activation rows run the AVX-512 VNNI kernel.
const MIN_ROWS: usize = 4;

/// One 64-byte line: a tile row.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The two C tiles' results, `[set][row]`, 16 `i32` a row.
#[repr(C, align(64))]
struct CTiles([[[i32; PANEL]; GROUP]; 2]);

thread_local! {
    /// Each thread's unpacked panel (the B lines of every block).
    static UNPACKED: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
    /// The tile configuration this thread loaded last, `(rows, k)` (loading one is slow, and
    /// the state stays with the thread).
    static CONFIG: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The AMX [`crate::cpu::packed::PanelFn`].
pub(in crate::cpu::packed) fn panel_amx(job: &PanelJob<'_>, out: &mut PanelOut) {
    if job.na < MIN_ROWS {
        return super::panel_avx512(job, out);
    }
    check(job, MAX_ACT_ROWS);
    let (acts, nb) = (job.acts, job.nb);
    let bm_len = nb * acts.rows + BLOCK_MAJOR_PAD;
    assert!(
        acts.rows >= job.j0 + job.na
            && acts.d_bm.len() >= bm_len
            && (job.kind != PackedKind::Q4_1 || acts.s_bm.len() >= bm_len),
        "AMX panel kernel: block-major constants too short"
    );
    UNPACKED.with_borrow_mut(|lines| {
        lines.resize(nb * job.kind.block_elems() / 4, Line([0; 64]));
        // SAFETY: `panel_kernel` hands this kernel out only where `Isa::tiles` holds (AMX,
        // AVX-512 VNNI); `check` verified the panel's `nb` blocks; `lines` holds one line per
        // 4 elements of a row, what `unpack` writes.
        unsafe { unpack(job, lines.as_mut_ptr().cast()) };
        let b: *const u8 = lines.as_ptr().cast();
        let mut c = CTiles([[[0; PANEL]; GROUP]; 2]);
        for g0 in (0..job.na).step_by(GROUP) {
            let rows = (job.na - g0).min(GROUP);
            let out = &mut out[g0..g0 + rows];
            // SAFETY: as above; `b` holds the panel's B lines (`nb · block_elems / 4` of them),
            // the activations hold rows `j0..j0 + na` (checked) and the block-major constants
            // those rows plus the padding (asserted).
            unsafe {
                match job.kind {
                    PackedKind::Q4_0 | PackedKind::Q8_0 => {
                        run_blocks::<false, true>(job, b, g0, rows, &mut c, out)
                    }
                    PackedKind::Q4_1 => run_blocks::<true, false>(job, b, g0, rows, &mut c, out),
                    PackedKind::Q4_K => run_q4_k(job, b, g0, rows, &mut c, out),
                    PackedKind::Q6_K => run_q6_k(job, b, g0, rows, &mut c, out),
                }
            }
        }
    });
}

/// Configures the tiles: C in tmm0/tmm1 (`rows` × 16 `i32`), A in tmm2/tmm3 (`rows` × `k`
/// activation bytes), B in tmm4/tmm5 (`k / 4` lines); nothing if the thread has that already.
///
/// # Safety
/// The CPU has AMX and the process was granted the tile state.
unsafe fn configure(rows: usize, k: usize) {
    if CONFIG.get() == (rows, k) {
        return;
    }
    CONFIG.set((rows, k));
    #[repr(C, align(64))]
    struct TileConfig([u8; 64]);
    let mut cfg = TileConfig([0; 64]);
    cfg.0[0] = 1; // palette 1
    for (t, (r, colsb)) in [
        (rows, 64),
        (rows, 64),
        (rows, k),
        (rows, k),
        (k / 4, 64),
        (k / 4, 64),
    ]
    .into_iter()
    .enumerate()
    {
        cfg.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&(colsb as u16).to_le_bytes());
        cfg.0[48 + t] = r as u8;
    }
    // SAFETY: `cfg` is a valid palette-1 configuration (at most 16 rows of at most 64 bytes);
    // the caller's contract covers the instruction.
    unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
}

/// Tile set `T` (0 or 1) computes A · B: A the configured rows of activation bytes at `a`
/// (`a_stride` apart), B the configured lines at `b` (signed bytes if `SIGNED`, else
/// unsigned); the result stays in the set's C tile.
///
/// # Safety
/// The tiles are configured; the A rows and B lines are in bounds.
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
    // SAFETY: the caller's contract; tmm0-tmm5 belong to this kernel.
    unsafe {
        match (T, SIGNED) {
            (0, true) => tiles!("tdpbssd", "tmm0", "tmm2", "tmm4"),
            (0, false) => tiles!("tdpbsud", "tmm0", "tmm2", "tmm4"),
            (_, true) => tiles!("tdpbssd", "tmm1", "tmm3", "tmm5"),
            (_, false) => tiles!("tdpbsud", "tmm1", "tmm3", "tmm5"),
        }
    }
}

/// Stores tile set `T`'s C tile as 64-byte rows at `c`.
///
/// # Safety
/// The tiles are configured; `c` has room for the configured rows.
#[inline(always)]
unsafe fn store_c<const T: usize>(c: *mut [i32; PANEL]) {
    // SAFETY: the caller's contract.
    unsafe {
        if T == 0 {
            asm!("tilestored [{c} + {line} * 1], tmm0", c = in(reg) c, line = in(reg) 64usize, options(nostack));
        } else {
            asm!("tilestored [{c} + {line} * 1], tmm1", c = in(reg) c, line = in(reg) 64usize, options(nostack));
        }
    }
}

/// Runs `steps` tile products, step `s` on activation bytes `a_of(s)` and B lines `b_of(s)`,
/// and hands each step's integer sums to `scale` in order.
///
/// The stages are spread over iterations so that none waits on the one before: iteration
/// `s` stores the C tile of step `s − 2` (its product is long done), starts step `s` in the
/// same tile set, and scales step `s − 3`, whose sums were stored an iteration earlier. A
/// tile store right behind its product, or loads right behind a tile store, stall the core.
///
/// # Safety
/// The tiles are configured; every step's A rows and B lines are in bounds.
#[inline(always)]
unsafe fn pipeline<const SIGNED: bool>(
    steps: usize,
    a_stride: usize,
    a_of: impl Fn(usize) -> *const i8,
    b_of: impl Fn(usize) -> *const u8,
    c: &mut CTiles,
    mut scale: impl FnMut(usize, &[[i32; PANEL]; GROUP]),
) {
    for s in 0..steps + 3 {
        let even = s.is_multiple_of(2);
        if (2..steps + 2).contains(&s) {
            let dst = c.0[s % 2].as_mut_ptr();
            // SAFETY: the tiles are configured (the caller's contract); `dst` holds 16 rows.
            unsafe {
                if even {
                    store_c::<0>(dst)
                } else {
                    store_c::<1>(dst)
                }
            }
        }
        if s < steps {
            let (a, b) = (a_of(s), b_of(s));
            // SAFETY: the caller's contract for step s.
            unsafe {
                if even {
                    compute::<0, SIGNED>(a, a_stride, b)
                } else {
                    compute::<1, SIGNED>(a, a_stride, b)
                }
            }
        }
        if s >= 3 {
            scale(s - 3, &c.0[(s - 3) % 2]);
        }
    }
}

/// The panel's quants as B lines at `dst`: line `g` holds elements `4g..4g + 4` of each of
/// the 16 rows. Q4_0 and Q8_0 come out signed (their offset taken off, so the products need
/// no correction); Q4_1 and the K-quants unsigned, as stored.
///
/// # Safety
/// The CPU has AVX-512 BW; the panel holds `nb` blocks (checked); `dst` has room for
/// `nb · block_elems / 4` lines.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack(job: &PanelJob<'_>, dst: *mut u8) {
    let quants = job.panel.as_ptr();
    let bytes = job.nb * job.kind.quant_bytes();
    let (mask, top) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    let offset = _mm512_set1_epi8(job.kind.offset() as i8);
    // SAFETY: the loads stay within the panel's `bytes` quant bytes, the stores within the
    // lines (one per Q8_0 line, two per 64 nibble bytes; 512 bytes per 384-byte Q6_K chunk).
    unsafe {
        match job.kind {
            PackedKind::Q8_0 => {
                for v in 0..bytes / 64 {
                    if job.stream {
                        prefetch(quants.wrapping_add(64 * v + PREFETCH_BYTES), 64);
                    }
                    let raw = _mm512_loadu_si512(quants.add(64 * v).cast());
                    // q + 128 back to q: flip the top bit.
                    _mm512_store_si512(dst.add(64 * v).cast(), _mm512_xor_si512(raw, offset));
                }
            }
            PackedKind::Q6_K => {
                for ch in 0..bytes / 384 {
                    let (p, d) = (quants.add(384 * ch), dst.add(512 * ch));
                    if job.stream {
                        prefetch(p.wrapping_add(PREFETCH_BYTES), 384);
                    }
                    for v in 0..4 {
                        // The high bits of nibble vector v (see `layout.rs`), to bits 4..6.
                        let hv = _mm512_loadu_si512(p.add(256 + 64 * (v / 2)).cast());
                        let (lo_h, hi_h) = if v % 2 == 0 {
                            (_mm512_slli_epi16(hv, 4), _mm512_slli_epi16(hv, 2))
                        } else {
                            (hv, _mm512_srli_epi16(hv, 2))
                        };
                        let raw = _mm512_loadu_si512(p.add(64 * v).cast());
                        let lo = _mm512_or_si512(
                            _mm512_and_si512(raw, mask),
                            _mm512_and_si512(lo_h, top),
                        );
                        let hi = _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask),
                            _mm512_and_si512(hi_h, top),
                        );
                        _mm512_store_si512(d.add(128 * v).cast(), lo);
                        _mm512_store_si512(d.add(128 * v + 64).cast(), hi);
                    }
                }
            }
            _ => {
                for v in 0..bytes / 64 {
                    if job.stream {
                        prefetch(quants.wrapping_add(64 * v + PREFETCH_BYTES), 64);
                    }
                    let raw = _mm512_loadu_si512(quants.add(64 * v).cast());
                    let lo = _mm512_sub_epi8(_mm512_and_si512(raw, mask), offset);
                    let hi =
                        _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), mask), offset);
                    _mm512_store_si512(dst.add(128 * v).cast(), lo);
                    _mm512_store_si512(dst.add(128 * v + 64).cast(), hi);
                }
            }
        }
    }
}

/// Stores the first `out.len()` of `acc`.
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn store(acc: &[__m512; GROUP], out: &mut [[f32; PANEL]]) {
    // Constant indices only, so that `acc` stays in registers.
    each_row!(r => {
        if r < out.len() {
            // SAFETY: each output row holds 16 floats.
            unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
        }
    });
}

/// Q4_0, Q8_0 (`SIGNED` B lines) and Q4_1 (`MIN`): activation rows `j0 + g0..+rows` against the panel's B lines
/// at `b` (the order of operations of `reference.rs`'s `panel_ref`; the signed products of
/// Q4_0 and Q8_0 are exactly the spec's sums less its corrections).
///
/// # Safety
/// As [`panel_amx`]'s call: AMX and AVX-512 VNNI; the job passed the checks there.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_blocks<const MIN: bool, const SIGNED: bool>(
    job: &PanelJob<'_>,
    b: *const u8,
    g0: usize,
    rows: usize,
    c: &mut CTiles,
    out: &mut [[f32; PANEL]],
) {
    let (nb, acts, m) = (job.nb, job.acts, job.acts.rows);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let row0 = job.j0 + g0;
    // SAFETY: the panel's scales follow its `nb` blocks of quants; the activation rows and the
    // block-major constants from `row0` on are in bounds (checked by the caller).
    let (scales, a, d_bm, s_bm) = unsafe {
        (
            job.panel.as_ptr().add(nb * qb),
            acts.q.as_ptr().add(row0 * nb * 32),
            acts.d_bm.as_ptr().add(row0),
            acts.s_bm.as_ptr().wrapping_add(row0),
        )
    };
    let mut acc = [_mm512_setzero_ps(); GROUP];
    let scale = |i: usize, sums: &[[i32; PANEL]; GROUP]| {
        // SAFETY: block i's scales; 16 block-major constants of block i from `row0` on; C rows
        // of 16 `i32`, 64-byte aligned.
        unsafe {
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
    // SAFETY: block i < nb: its A rows (32 bytes each) and B lines (512 bytes a block).
    unsafe {
        configure(rows, 32);
        let (a_of, b_of) = (
            |i: usize| a.wrapping_add(32 * i),
            |i: usize| b.wrapping_add(512 * i),
        );
        pipeline::<SIGNED>(nb, nb * 32, a_of, b_of, c, scale);
        store(&acc, out);
    }
}

/// Q4_K: the order of operations of `reference.rs`'s `panel_q4_k_ref`.
///
/// # Safety
/// As [`run_blocks`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_q4_k(
    job: &PanelJob<'_>,
    b: *const u8,
    g0: usize,
    rows: usize,
    c: &mut CTiles,
    out: &mut [[f32; PANEL]],
) {
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let row0 = job.j0 + g0;
    // SAFETY: the scales follow the `nb` super-blocks of quants; rows `row0..+rows` of
    // activations are in bounds (checked by the caller).
    let (scales, a) = unsafe {
        (
            job.panel.as_ptr().add(nb * qb),
            acts.q.as_ptr().add(row0 * nb * 256),
        )
    };
    out.iter_mut().for_each(|o| *o = [0.0; PANEL]);
    let mut t = [_mm512_setzero_ps(); GROUP];
    let mut dw = _mm512_setzero_ps();
    let mut sc = [_mm_setzero_si128(); 8];
    let scale = |step: usize, sums: &[[i32; PANEL]; GROUP]| {
        let (i, s) = (step / 8, step % 8);
        let sp = scales.wrapping_add(i * sb);
        if s == 0 {
            // SAFETY: super-block i's 256 scale bytes are in the panel.
            unsafe {
                sc = q4_k_scales(sp).sc;
                dw = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q4_K_PANEL_D).cast()));
            }
            t = [_mm512_setzero_ps(); GROUP];
        }
        let dsc = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc[s])));
        each_row!(r => {
            // SAFETY: a C row of 16 `i32`, 64-byte aligned.
            let sum = unsafe { _mm512_load_si512(sums[r].as_ptr().cast()) };
            t[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), dsc, t[r]);
        });
        if s == 7 {
            // SAFETY: as above.
            let (mins, neg_dmin, d_a) = unsafe { q4_k_mins(job, sp, row0, i, rows) };
            each_row!(r => {
                if r < rows {
                    t[r] = _mm512_fmadd_ps(mins[r], neg_dmin, t[r]);
                    add_row(t[r], d_a[r], &mut out[r]);
                }
            });
        }
    };
    // SAFETY: sub-block s of super-block i < nb: 32 activation quants per row at
    // 256i + 32s, 8 B lines at 4096i + 512s.
    unsafe {
        configure(rows, 32);
        pipeline::<false>(
            8 * nb,
            nb * 256,
            |step| a.wrapping_add(32 * step),
            |step| b.wrapping_add(512 * step),
            c,
            scale,
        );
    }
}

/// Q4_K super-block `i`'s minimum terms (scales at `sp`) for activation rows
/// `row0..row0 + rows`: `f32(Σ_s mn[s] · sub-block sum)` of each row, `−dmin`, and each row's
/// activation scale.
///
/// # Safety
/// AVX-512 VNNI; 256 scale bytes at `sp`; the activation rows are in bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_k_mins(
    job: &PanelJob<'_>,
    sp: *const u8,
    row0: usize,
    i: usize,
    rows: usize,
) -> ([__m512; GROUP], __m512, [f32; GROUP]) {
    let (nb, acts) = (job.nb, job.acts);
    // SAFETY: the caller's contract.
    let (ks, dmin) = unsafe {
        (
            q4_k_scales(sp),
            _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q4_K_PANEL_DMIN).cast())),
        )
    };
    let mins: [__m512i; 4] = std::array::from_fn(|p| {
        let [lo, hi] = ks.mn_pairs[p];
        _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo))
    });
    let (mut sums_f, mut d_a) = ([_mm512_setzero_ps(); GROUP], [0.0f32; GROUP]);
    for r in 0..rows.min(GROUP) {
        let k = (row0 + r) * nb + i;
        let sums = &acts.sub_sums[k * 8..k * 8 + 8];
        let mut msum = _mm512_setzero_si512();
        for (p, mn) in mins.iter().enumerate() {
            msum = _mm512_dpwssd_epi32(msum, *mn, _mm512_set1_epi32(super::sum_pair(sums, p)));
        }
        sums_f[r] = _mm512_cvtepi32_ps(msum);
        d_a[r] = acts.d[k];
    }
    (sums_f, _mm512_sub_ps(_mm512_setzero_ps(), dmin), d_a)
}

/// `out = fma(t, d_a, out)`: the end of a K-quant super-block for one activation row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn add_row(t: __m512, d_a: f32, out: &mut [f32; PANEL]) {
    // SAFETY: the row holds 16 floats.
    unsafe {
        let acc = _mm512_loadu_ps(out.as_ptr());
        _mm512_storeu_ps(
            out.as_mut_ptr(),
            _mm512_fmadd_ps(t, _mm512_set1_ps(d_a), acc),
        );
    }
}

/// Q6_K: the order of operations of `reference.rs`'s `panel_q6_k_ref`.
///
/// # Safety
/// As [`run_blocks`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run_q6_k(
    job: &PanelJob<'_>,
    b: *const u8,
    g0: usize,
    rows: usize,
    c: &mut CTiles,
    out: &mut [[f32; PANEL]],
) {
    let (nb, acts) = (job.nb, job.acts);
    let (qb, sb) = (job.kind.quant_bytes(), job.kind.scale_bytes());
    let row0 = job.j0 + g0;
    // SAFETY: as in `run_q4_k`.
    let (scales, a) = unsafe {
        (
            job.panel.as_ptr().add(nb * qb),
            acts.q.as_ptr().add(row0 * nb * 256),
        )
    };
    out.iter_mut().for_each(|o| *o = [0.0; PANEL]);
    let mut t = [_mm512_setzero_ps(); GROUP];
    let mut d = _mm512_setzero_ps();
    let scale = |step: usize, sums: &[[i32; PANEL]; GROUP]| {
        let (i, s) = (step / 16, step % 16);
        let sp = scales.wrapping_add(i * sb);
        if s == 0 {
            // SAFETY: super-block i's 288 scale bytes (16 × 16 i8, then 16 f16 d).
            d = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(Q6_K_PANEL_D).cast())) };
            t = [_mm512_setzero_ps(); GROUP];
        }
        // SAFETY: scale s of the 16 rows, inside the 288 bytes.
        let scale = unsafe { _mm_loadu_si128(sp.add(16 * s).cast()) };
        let dsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(scale)));
        each_row!(r => {
            // SAFETY: a C row of 16 `i32`, 64-byte aligned.
            let sum = unsafe { _mm512_load_si512(sums[r].as_ptr().cast()) };
            t[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), dsc, t[r]);
        });
        if s == 15 {
            // SAFETY: as above.
            let (offsets, d_a) = unsafe { q6_k_offsets(job, sp, row0, i, rows) };
            let neg32d = _mm512_mul_ps(d, _mm512_set1_ps(-32.0));
            each_row!(r => {
                if r < rows {
                    t[r] = _mm512_fmadd_ps(offsets[r], neg32d, t[r]);
                    add_row(t[r], d_a[r], &mut out[r]);
                }
            });
        }
    };
    // SAFETY: sub-block s of super-block i < nb: 16 activation quants per row at
    // 256i + 16s, 4 B lines at 4096i + 256s.
    unsafe {
        configure(rows, 16);
        pipeline::<false>(
            16 * nb,
            nb * 256,
            |step| a.wrapping_add(16 * step),
            |step| b.wrapping_add(256 * step),
            c,
            scale,
        );
    }
}

/// Q6_K super-block `i`'s offset terms (scales at `sp`) for activation rows
/// `row0..row0 + rows`: `f32(Σ_s sc[s] · 16-value sum)` of each row, and each row's
/// activation scale.
///
/// # Safety
/// AVX-512 VNNI; 288 scale bytes at `sp`; the activation rows are in bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6_k_offsets(
    job: &PanelJob<'_>,
    sp: *const u8,
    row0: usize,
    i: usize,
    rows: usize,
) -> ([__m512; GROUP], [f32; GROUP]) {
    let (nb, acts) = (job.nb, job.acts);
    // SAFETY: the caller's contract: 16 loads of 16 bytes within the 288.
    let sc: [__m128i; 16] =
        std::array::from_fn(|s| unsafe { _mm_loadu_si128(sp.add(16 * s).cast()) });
    let pairs: [__m512i; 8] = std::array::from_fn(|p| {
        let (x, y) = (sc[2 * p], sc[2 * p + 1]);
        let bytes = _mm256_set_m128i(_mm_unpackhi_epi8(x, y), _mm_unpacklo_epi8(x, y));
        _mm512_cvtepi8_epi16(bytes)
    });
    let (mut sums_f, mut d_a) = ([_mm512_setzero_ps(); GROUP], [0.0f32; GROUP]);
    for r in 0..rows.min(GROUP) {
        let k = (row0 + r) * nb + i;
        let sums = &acts.bsums[k * 16..k * 16 + 16];
        let mut csum = _mm512_setzero_si512();
        for (p, sc2) in pairs.iter().enumerate() {
            csum = _mm512_dpwssd_epi32(csum, *sc2, _mm512_set1_epi32(super::sum_pair(sums, p)));
        }
        sums_f[r] = _mm512_cvtepi32_ps(csum);
        d_a[r] = acts.d[k];
    }
    (sums_f, d_a)
}
