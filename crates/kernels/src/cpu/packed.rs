//! Weight matrices repacked at load time into panels of [`PANEL`] interleaved rows, and their
//! matrix product.
//!
//! In a GGUF file each weight row is a run of blocks. For the product `y = x · Wᵀ` the packed
//! layout (see `layout.rs`) stores, per panel of 16 rows and per block, the quants of all 16
//! rows interleaved 4 elements at a time, then their 16 scales. One 64-byte load then feeds
//! one `vpdpbusd` that advances 16 output sums at once, against 4 activation quants broadcast
//! from memory; the block's integer sums are scaled once per block:
//!
//! ```text
//!   for each panel (16 rows), for up to 8 activation rows j at a time:
//!     for each block i:   isum[j] (16 lanes, i32) = Σ_v vpdpbusd(wq[i][v], bcast(a_j[i][v]))
//!                         y[j] (16 lanes, f32)   += f32(isum[j] − corr_j,i) · d_w[i] · d_a[j,i]
//!                                                 (+ m_w[i] · s_a[j,i] for Q4_1)
//! ```
//!
//! Quants are stored unsigned (Q4: 0..=15; Q8_0: q + 128), so the signed-activation dot
//! product of `vpdpbusd` applies directly; the offset comes back out through the activation
//! block's quant sum (`corr` = offset · Σ a). Activations are quantized exactly as for the
//! GGUF kernels, so results match theirs up to `f32` summation order.
//!
//! On AVX2 (no `vpdpbusd`) the same layout is read as two 8-row halves and `maddubs` + `madd`
//! stand in for `vpdpbusd` (`x86/avx2.rs`). The buffers ask for transparent huge pages
//! (`HugeBuffer`), and products that read one input can share a pool call
//! ([`matmul_packed_many`]).
//!
//! Packing happens only where a SIMD kernel for the layout exists ([`worth_packing`]); the
//! scalar kernel (`reference.rs`) is the spec every variant is tested against.

mod acts;
mod kind;
mod layout;
mod matrix;
mod reference;
mod segments;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use acts::PackedActs;
use half::f16;
pub use kind::PackedKind;
pub use matrix::PackedMatrix;
pub use segments::{matmul_packed_segments_with, SegmentWeights};

use crate::cpu::gemm::Scratch;
use crate::cpu::threadpool::SharedMut;
use crate::cpu::{Isa, ThreadPool};
use crate::quant::{self, DType};

/// Weight rows per panel (one AVX-512 register of `i32`/`f32` lanes).
pub const PANEL: usize = 16;

/// Activation rows per chunk: a thread runs all its panels over one chunk before the next, so
/// the chunk's quantized rows stay in L2. One kernel call handles a panel against one chunk.
const ACT_CHUNK: usize = 64;

/// Activation rows one kernel call handles: the AMX kernel's chunk ([`chunk_rows`]).
pub const MAX_ACT_ROWS: usize = 2 * ACT_CHUNK;

/// Activation rows the AVX2 and AVX-512 kernels handle at a time (their sums and results live
/// in registers); [`in_pieces`] splits a call.
const PIECE_ROWS: usize = 8;

/// Whether a `rows`-row matrix of `dtype` gets packed on this CPU: the type has a packed
/// layout, whole panels, and a SIMD kernel for it is available (`KESTREL_ISA` caps this too).
pub fn worth_packing(dtype: DType, rows: usize) -> bool {
    PackedKind::of(dtype).is_some() && rows.is_multiple_of(PANEL) && Isa::detected() >= Isa::Avx2
}

/// One kernel call: activation rows `j0..j0 + na` (`na ≤ MAX_ACT_ROWS`) against one panel.
pub struct PanelJob<'a> {
    pub kind: PackedKind,
    /// Blocks per row.
    pub nb: usize,
    pub panel: &'a [u8],
    pub acts: &'a PackedActs,
    pub j0: usize,
    pub na: usize,
    /// Whether this call is the first over the panel for its activation rows, so the panel
    /// comes from memory: the kernel prefetches ahead (later calls find it in cache).
    pub stream: bool,
}

impl<'a> PanelJob<'a> {
    /// Rows `j0..j0 + na` of `acts` against panel `p` of `w` (`stream`: see the field).
    fn new(
        w: &'a PackedMatrix,
        p: usize,
        acts: &'a PackedActs,
        j0: usize,
        na: usize,
        stream: bool,
    ) -> Self {
        Self {
            kind: w.kind(),
            nb: w.blocks(),
            panel: w.panel(p),
            acts,
            j0,
            na,
            stream,
        }
    }
}

/// Results of a [`PanelJob`]: `out[j][r]` for activation row `j0 + j` and panel row `r`.
pub type PanelOut = [[f32; PANEL]; MAX_ACT_ROWS];

/// A [`PanelOut`] from a cache-line boundary: each row is one line (the AMX kernel keeps its
/// running sums there, and a row across two lines costs two accesses and stalls forwarding).
#[repr(C, align(64))]
struct LineOut(PanelOut);

impl LineOut {
    fn new() -> Self {
        Self([[0.0; PANEL]; MAX_ACT_ROWS])
    }
}

/// Results of a piece of a job ([`PIECE_ROWS`] rows).
type PieceOut = [[f32; PANEL]; PIECE_ROWS];

/// A panel kernel (see [`PanelJob`]).
pub type PanelFn = fn(&PanelJob<'_>, &mut PanelOut);

/// Runs `kernel`, which handles up to [`PIECE_ROWS`] rows, over a job's rows a piece at a
/// time; only the first piece streams the panel in.
#[cfg(target_arch = "x86_64")]
fn in_pieces(
    job: &PanelJob<'_>,
    out: &mut PanelOut,
    kernel: impl Fn(&PanelJob<'_>, &mut PieceOut),
) {
    for (q, piece) in out.chunks_exact_mut(PIECE_ROWS).enumerate() {
        let first = q * PIECE_ROWS;
        if first >= job.na {
            break;
        }
        let part = PanelJob {
            j0: job.j0 + first,
            na: (job.na - first).min(PIECE_ROWS),
            stream: job.stream && q == 0,
            ..*job
        };
        let piece: &mut PieceOut = piece.try_into().expect("pieces of PIECE_ROWS rows");
        kernel(&part, piece);
    }
}

impl PanelJob<'_> {
    /// Scale `(d, m)` of panel row `r` in block `i` (`m` = 0 except Q4_1); for the scalar code.
    fn weight_scales(&self, i: usize, r: usize) -> (f32, f32) {
        let (qb, sb) = (self.kind.quant_bytes(), self.kind.scale_bytes());
        let s = &self.panel[self.nb * qb + i * sb..][..sb];
        let half = |o: usize| f16::from_le_bytes([s[o], s[o + 1]]).to_f32();
        match self.kind {
            PackedKind::Q4_1 => (half(2 * r), half(32 + 2 * r)),
            _ => (half(2 * r), 0.0),
        }
    }

    /// Q4_K scales of panel row `r` in super-block `i`: `(d, dmin, sc, mn)`; for the scalar
    /// code.
    fn q4_k_scales(&self, i: usize, r: usize) -> (f32, f32, [u8; 8], [u8; 8]) {
        let (qb, sb) = (self.kind.quant_bytes(), self.kind.scale_bytes());
        let s = &self.panel[self.nb * qb + i * sb..][..sb];
        let half = |o: usize| f16::from_le_bytes([s[o], s[o + 1]]).to_f32();
        let packed: [u8; 12] = std::array::from_fn(|k| s[16 * k + r]);
        let (sc, mn) = quant::q4_k::unpack_scales(&packed);
        (
            half(layout::Q4_K_PANEL_D + 2 * r),
            half(layout::Q4_K_PANEL_DMIN + 2 * r),
            sc,
            mn,
        )
    }

    /// Q6_K scales of panel row `r` in super-block `i`: `(d, sc)`; for the scalar code.
    fn q6_k_scales(&self, i: usize, r: usize) -> (f32, [i8; 16]) {
        let (qb, sb) = (self.kind.quant_bytes(), self.kind.scale_bytes());
        let s = &self.panel[self.nb * qb + i * sb..][..sb];
        let o = layout::Q6_K_PANEL_D + 2 * r;
        let d = f16::from_le_bytes([s[o], s[o + 1]]).to_f32();
        (d, std::array::from_fn(|k| s[16 * k + r] as i8))
    }

    /// Quants of block `i`.
    fn quants(&self, i: usize) -> &[u8] {
        let qb = self.kind.quant_bytes();
        &self.panel[i * qb..][..qb]
    }
}

/// The panel kernel for `isa` (capped at what this CPU supports): on AVX-512, the AMX tile
/// kernel where [`Isa::tiles`] allows it.
pub fn panel_kernel(isa: Isa) -> PanelFn {
    match isa.min(Isa::supported()) {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni if Isa::tiles() => x86::panel_amx,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => x86::panel_avx512,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::panel_avx2,
        _ => reference::panel_ref,
    }
}

/// A panel kernel and the scalar spec it is bit-identical to.
pub struct PanelVariant {
    pub name: &'static str,
    pub kernel: PanelFn,
    pub spec: PanelFn,
}

/// Every panel kernel this CPU can run, with its spec (tests compare them). The AMX and AVX2
/// kernels sum each K-quant super-block exactly before rounding: their spec, [`tiles_spec`],
/// agrees with [`panel_spec`] to `f32` rounding.
pub fn panel_kernels() -> Vec<PanelVariant> {
    let variant = |name, kernel, spec| PanelVariant { name, kernel, spec };
    let mut all = vec![variant("scalar", panel_spec(), panel_spec())];
    #[cfg(target_arch = "x86_64")]
    {
        let best = Isa::supported();
        if best >= Isa::Avx2 {
            all.push(variant("avx2", x86::panel_avx2, tiles_spec()));
        }
        if best >= Isa::Avx512Vnni {
            all.push(variant("avx512-vnni", x86::panel_avx512, panel_spec()));
        }
        if Isa::tiles_supported() {
            all.push(variant("amx", x86::panel_amx, tiles_spec()));
        }
    }
    all
}

/// The scalar spec of the packed product (the VNNI and AVX2 kernels' order of operations).
pub fn panel_spec() -> PanelFn {
    reference::panel_ref
}

/// The scalar spec of the AMX and AVX2 kernels (whole K-quant super-blocks summed in `i32`).
pub fn tiles_spec() -> PanelFn {
    reference::panel_tiles_ref
}

/// `y (m × w.rows()) = x (m × w.cols()) · Wᵀ` with the kernel for this CPU.
pub fn matmul_packed(
    pool: &ThreadPool,
    w: &PackedMatrix,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut Scratch,
) {
    matmul_packed_with(pool, panel_kernel(Isa::detected()), w, x, m, y, scratch)
}

/// [`matmul_packed`] with an explicit panel kernel (tests cover every variant).
pub fn matmul_packed_with(
    pool: &ThreadPool,
    kernel: PanelFn,
    w: &PackedMatrix,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut Scratch,
) {
    matmul_packed_many_with(pool, kernel, [w], x, m, [y], scratch)
}

/// `y_k (m × w_k.rows()) = x · W_kᵀ` for `N` matrices that read the same input (Q/K/V,
/// gate/up): `x` is quantized once, and the panels of all the matrices are shared out over the
/// threads in one pool call, so small matrices cost one wake-up between them and balance
/// across threads together. The matrices must have the same kind and column count.
pub fn matmul_packed_many<const N: usize>(
    pool: &ThreadPool,
    ws: [&PackedMatrix; N],
    x: &[f32],
    m: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
) {
    let kernel = panel_kernel(Isa::detected());
    matmul_packed_many_with(pool, kernel, ws, x, m, ys, scratch)
}

/// Whether [`matmul_packed_many`] accepts these matrices together.
pub fn can_share_input(ws: &[&PackedMatrix]) -> bool {
    ws.windows(2)
        .all(|p| p[0].kind() == p[1].kind() && p[0].cols() == p[1].cols())
}

/// Quantizes `x` (`m` rows of `w`'s columns) as `w`'s kernels take it and unpacks it into
/// `scratch.packed` (with the block-major copies `kernel` reads if it is a tile kernel).
fn pack_acts(
    pool: &ThreadPool,
    kernel: PanelFn,
    w: &PackedMatrix,
    x: &[f32],
    m: usize,
    scratch: &mut Scratch,
) {
    let tiles = is_tile_kernel(kernel);
    let (acts, buf) = (&mut scratch.packed, &mut scratch.act);
    acts.quantize_fill(pool, w.kind(), x, (m, w.cols()), tiles, buf);
}

/// [`matmul_packed_many`] with an explicit panel kernel.
pub fn matmul_packed_many_with<const N: usize>(
    pool: &ThreadPool,
    kernel: PanelFn,
    ws: [&PackedMatrix; N],
    x: &[f32],
    m: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
) {
    let Some(w0) = ws.first() else { return };
    assert!(
        can_share_input(&ws),
        "matmul_packed_many: kinds or columns differ"
    );
    assert_eq!(x.len(), m * w0.cols(), "matmul_packed: x must be m × cols");
    for (w, y) in ws.iter().zip(&ys) {
        assert_eq!(y.len(), m * w.rows(), "matmul_packed: y must be m × rows");
    }
    if m == 0 {
        return;
    }
    let kind = w0.kind();
    pack_acts(pool, kernel, w0, x, m, scratch);
    let outs = ys.map(SharedMut::new);
    let panels = ws.map(|w| w.rows() / PANEL);
    let total: usize = panels.iter().sum();
    let chunk = chunk_rows(kernel);
    // One chunk (decode): the panels are shared out as ranges that threads finishing early
    // take the rest of (see `WorkRanges`).
    let one_chunk = m <= chunk;
    let per = panels_per_call(kernel, kind, m);
    let units = total.div_ceil(per);
    if one_chunk {
        scratch.ranges.reset(units, pool.n_threads());
    }
    let (acts, ranges) = (&scratch.packed, &scratch.ranges);
    pool.broadcast(&|t, n| {
        let mut tiles = [LineOut::new(), LineOut::new()];
        let [tile0, tile1] = &mut tiles;
        // Unit u: panels `per·u..per·u + per` (of all the matrices' panels in turn).
        let mut run = |u: usize, rows: std::ops::Range<usize>| {
            let g = u * per;
            let (k, p) = locate(&panels, g);
            #[cfg(target_arch = "x86_64")]
            if per == 2 && g + 1 < total {
                let (k1, p1) = locate(&panels, g + 1);
                let pair = [(ws[k], p, &outs[k]), (ws[k1], p1, &outs[k1])];
                return panel_pair_rows(kernel, pair, acts, rows, [&mut tile0.0, &mut tile1.0]);
            }
            panel_rows(kernel, ws[k], acts, p, rows, &outs[k], &mut tile0.0);
        };
        if one_chunk {
            return ranges.run(t, |u| run(u, 0..m));
        }
        for c0 in (0..m).step_by(chunk) {
            let rows = c0..(c0 + chunk).min(m);
            for u in units * t / n..units * (t + 1) / n {
                run(u, rows.clone());
            }
        }
    });
}

/// Panels one call of `kernel` takes for `m` activation rows of `kind`: two where the AMX
/// K-quant kernel takes them together (with more than one tile of rows each activation tile
/// meets both panels while in L1; with one, batched decode, one pipeline runs through both
/// panels instead of filling and draining per panel), else one.
fn panels_per_call(kernel: PanelFn, kind: PackedKind, m: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if is_tile_kernel(kernel) && kind.block_elems() == 256 && m >= x86::TILE_MIN_ROWS {
        return 2;
    }
    let _ = (kernel, kind, m);
    1
}

/// Activation rows per chunk for `kernel`: the AMX kernel unpacks its panel once per call, so
/// it takes twice the rows (their quants still fit in L2; measured 5-8% faster prefill on
/// K-quants), where the register kernels keep [`ACT_CHUNK`] (10% slower with twice).
fn chunk_rows(kernel: PanelFn) -> usize {
    if is_tile_kernel(kernel) {
        MAX_ACT_ROWS
    } else {
        ACT_CHUNK
    }
}

/// Whether `kernel` is the AMX kernel (which alone reads the block-major activations).
fn is_tile_kernel(kernel: PanelFn) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::ptr::fn_addr_eq(kernel, x86::panel_amx as PanelFn) {
        return true;
    }
    let _ = kernel;
    false
}

/// Matrix and panel of global panel index `g` (the matrices' panels counted in order).
fn locate(panels: &[usize], mut g: usize) -> (usize, usize) {
    for (k, &n) in panels.iter().enumerate() {
        if g < n {
            return (k, g);
        }
        g -= n;
    }
    unreachable!("panel index past the last matrix")
}

/// [`matmul_packed_segments_with`] with the kernel for this CPU.
pub fn matmul_packed_segments<'w, const N: usize>(
    pool: &ThreadPool,
    weights: &SegmentWeights<'w, N>,
    offsets: &[usize],
    x: &[f32],
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
) {
    let kernel = panel_kernel(Isa::detected());
    matmul_packed_segments_with(pool, kernel, weights, offsets, x, ys, scratch)
}

/// [`panel_rows`] for two panels (each of a matrix, its index and its output) sharing the
/// AMX kernel's calls ([`x86::panel_pair_amx`]), or one call each where it declines.
#[cfg(target_arch = "x86_64")]
fn panel_pair_rows(
    kernel: PanelFn,
    pair: [(&PackedMatrix, usize, &SharedMut<'_, f32>); 2],
    acts: &PackedActs,
    rows: std::ops::Range<usize>,
    tiles: [&mut PanelOut; 2],
) {
    let [t0, t1] = tiles;
    for j0 in rows.clone().step_by(MAX_ACT_ROWS) {
        let na = (rows.end - j0).min(MAX_ACT_ROWS);
        let jobs = pair.map(|(w, p, _)| PanelJob::new(w, p, acts, j0, na, j0 == rows.start));
        if !x86::panel_pair_amx([&jobs[0], &jobs[1]], [&mut *t0, &mut *t1]) {
            kernel(&jobs[0], t0);
            kernel(&jobs[1], t1);
        }
        for ((w, p, out), tile) in pair.into_iter().zip([&*t0, &*t1]) {
            copy_rows(w, p, j0, na, tile, out);
        }
    }
}

/// Rows `0..na` of `tile` (activation rows `j0..`) into panel `p`'s columns of `out`.
fn copy_rows(
    w: &PackedMatrix,
    p: usize,
    j0: usize,
    na: usize,
    tile: &PanelOut,
    out: &SharedMut<'_, f32>,
) {
    for (j, row) in tile.iter().enumerate().take(na) {
        // SAFETY: the calling thread writes only panel `p`'s columns of rows `j0..j0 + na`, a
        // unit of work that the product's plan hands to exactly one thread.
        let dst = unsafe { out.slice_mut((j0 + j) * w.rows() + p * PANEL, PANEL) };
        dst.copy_from_slice(row);
    }
}

/// Activation rows `rows` against panel `p`, [`MAX_ACT_ROWS`] per kernel call, into `out`
/// (`m × w.rows()`), through the calling thread's `tile`.
fn panel_rows(
    kernel: PanelFn,
    w: &PackedMatrix,
    acts: &PackedActs,
    p: usize,
    rows: std::ops::Range<usize>,
    out: &SharedMut<'_, f32>,
    tile: &mut PanelOut,
) {
    for j0 in rows.clone().step_by(MAX_ACT_ROWS) {
        let na = (rows.end - j0).min(MAX_ACT_ROWS);
        let job = PanelJob::new(w, p, acts, j0, na, j0 == rows.start);
        kernel(&job, tile);
        copy_rows(w, p, j0, na, tile, out);
    }
}
