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
//! Packing happens only where a SIMD kernel for the layout exists ([`worth_packing`]); the
//! scalar kernel (`reference.rs`) is the spec every variant is tested against.

mod acts;
mod layout;
mod reference;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use acts::PackedActs;
use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::cpu::gemm::{quantize_rows, Scratch};
use crate::cpu::threadpool::SharedMut;
use crate::cpu::{Isa, ThreadPool};
use crate::quant::{self, ActFormat, DType};

/// Weight rows per panel (one AVX-512 register of `i32`/`f32` lanes).
pub const PANEL: usize = 16;

/// Activation rows one kernel call handles.
pub const MAX_ACT_ROWS: usize = 8;

/// Activation rows per chunk: a thread runs all its panels over one chunk before the next, so
/// the chunk's quantized rows stay in L2.
const ACT_CHUNK: usize = 64;

/// Weight types with a packed layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedKind {
    Q4_0,
    Q4_1,
    Q8_0,
}

impl PackedKind {
    /// The packed kind of `dtype`, if it has one.
    pub fn of(dtype: DType) -> Option<PackedKind> {
        match dtype {
            DType::Q4_0 => Some(PackedKind::Q4_0),
            DType::Q4_1 => Some(PackedKind::Q4_1),
            DType::Q8_0 => Some(PackedKind::Q8_0),
            _ => None,
        }
    }

    pub const fn dtype(self) -> DType {
        match self {
            PackedKind::Q4_0 => DType::Q4_0,
            PackedKind::Q4_1 => DType::Q4_1,
            PackedKind::Q8_0 => DType::Q8_0,
        }
    }

    /// The activation format the kernels consume (the GGUF kernels' one).
    pub const fn act(self) -> ActFormat {
        match self {
            PackedKind::Q4_1 => ActFormat::Q8_1,
            _ => ActFormat::Q8_0,
        }
    }

    /// What the stored unsigned quants exceed the signed ones by (0 for Q4_1, whose quants are
    /// unsigned in the file too and whose minimum is applied separately).
    pub(super) const fn offset(self) -> i32 {
        match self {
            PackedKind::Q4_0 => 8,
            PackedKind::Q4_1 => 0,
            PackedKind::Q8_0 => 128,
        }
    }

    /// Packed quant bytes of one block of a panel.
    pub(super) const fn quant_bytes(self) -> usize {
        match self {
            PackedKind::Q8_0 => 32 * PANEL,
            _ => 16 * PANEL,
        }
    }

    /// Scale bytes of one block of a panel (`f16` d per row; Q4_1 adds `f16` m per row).
    pub(super) const fn scale_bytes(self) -> usize {
        match self {
            PackedKind::Q4_1 => 4 * PANEL,
            _ => 2 * PANEL,
        }
    }
}

/// Whether a `rows`-row matrix of `dtype` gets packed on this CPU: the type has a packed
/// layout, whole panels, and a SIMD kernel for it is available (`KESTREL_ISA` caps this too).
pub fn worth_packing(dtype: DType, rows: usize) -> bool {
    PackedKind::of(dtype).is_some() && rows % PANEL == 0 && Isa::detected() >= Isa::Avx512Vnni
}

/// One 64-byte line, so panels start on cache-line boundaries.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A `rows × cols` weight matrix in the packed layout.
pub struct PackedMatrix {
    kind: PackedKind,
    rows: usize,
    cols: usize,
    /// Bytes per panel, rounded up to whole lines.
    panel_stride: usize,
    lines: Vec<Line>,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("kind", &self.kind)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl PackedMatrix {
    /// Packs a row-major GGUF matrix. `None` if `dtype` has no packed layout, `rows` is not a
    /// multiple of [`PANEL`], or `data` is not exactly `rows` rows of `cols` elements.
    pub fn pack(dtype: DType, rows: usize, cols: usize, data: &[u8]) -> Option<PackedMatrix> {
        let kind = PackedKind::of(dtype)?;
        let row_bytes = dtype.row_bytes(cols)?;
        if rows % PANEL != 0 || data.len() != rows * row_bytes {
            return None;
        }
        let panel_stride = (PANEL * row_bytes).div_ceil(64) * 64;
        let mut m = PackedMatrix {
            kind,
            rows,
            cols,
            panel_stride,
            lines: vec![Line([0; 64]); rows / PANEL * panel_stride / 64],
        };
        let nb = m.blocks();
        let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
        for p in 0..rows / PANEL {
            let src: [&[u8]; PANEL] =
                std::array::from_fn(|r| &data[(p * PANEL + r) * row_bytes..][..row_bytes]);
            let panel = &mut m.bytes_mut()[p * panel_stride..][..nb * (qb + sb)];
            let (quants, scales) = panel.split_at_mut(nb * qb);
            for i in 0..nb {
                let (q, s) = (&mut quants[i * qb..][..qb], &mut scales[i * sb..][..sb]);
                layout::pack_block(kind, &src, i, q, s);
            }
        }
        Some(m)
    }

    pub fn kind(&self) -> PackedKind {
        self.kind
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held (panels with their padding).
    pub fn n_bytes(&self) -> usize {
        self.lines.len() * 64
    }

    fn blocks(&self) -> usize {
        self.cols / 32
    }

    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.lines)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.lines)
    }

    /// Panel `p`: its quant bytes, then its scale bytes.
    fn panel(&self, p: usize) -> &[u8] {
        let nb = self.blocks();
        let len = nb * (self.kind.quant_bytes() + self.kind.scale_bytes());
        &self.bytes()[p * self.panel_stride..][..len]
    }

    /// Row `r` in its GGUF encoding (`dtype.row_bytes(cols)` bytes into `out`).
    pub fn unpack_row(&self, r: usize, out: &mut [u8]) {
        let (kind, nb) = (self.kind, self.blocks());
        let (qb, sb, bb) = (kind.quant_bytes(), kind.scale_bytes(), layout::block_bytes(kind));
        let (quants, scales) = self.panel(r / PANEL).split_at(nb * qb);
        for i in 0..nb {
            let (q, s) = (&quants[i * qb..][..qb], &scales[i * sb..][..sb]);
            layout::unpack_block(kind, q, s, r % PANEL, &mut out[i * bb..][..bb]);
        }
    }

    /// Dequantizes row `r` into `out` (`cols` values).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let dtype = self.kind.dtype();
        let mut row = vec![0u8; dtype.row_bytes(self.cols).unwrap_or(0)];
        self.unpack_row(r, &mut row);
        quant::dequantize_row(dtype, &row, &mut out[..self.cols]);
    }
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
}

/// Results of a [`PanelJob`]: `out[j][r]` for activation row `j0 + j` and panel row `r`.
pub type PanelOut = [[f32; PANEL]; MAX_ACT_ROWS];

/// A panel kernel (see [`PanelJob`]).
pub type PanelFn = fn(&PanelJob<'_>, &mut PanelOut);

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

    /// Quants of block `i`.
    fn quants(&self, i: usize) -> &[u8] {
        let qb = self.kind.quant_bytes();
        &self.panel[i * qb..][..qb]
    }
}

/// The panel kernel for `isa` (capped at what this CPU supports).
pub fn panel_kernel(isa: Isa) -> PanelFn {
    match isa.min(Isa::supported()) {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => x86::panel_avx512,
        _ => reference::panel_ref,
    }
}

/// `y (m × w.rows) = x (m × w.cols) · Wᵀ` with the kernel for this CPU.
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
    assert_eq!(x.len(), m * w.cols, "matmul_packed: x must be m × cols");
    assert_eq!(y.len(), m * w.rows, "matmul_packed: y must be m × rows");
    if m == 0 {
        return;
    }
    let (kind, nb) = (w.kind, w.blocks());
    let act = kind.act();
    let quantize = quant::act::kernels().quantize[act as usize];
    let a_row = act.row_bytes(w.cols);
    let blocks = quantize_rows(pool, quantize, x, m, w.cols, a_row, &mut scratch.act);
    scratch.packed.fill(kind, blocks, m, nb);
    let acts = &scratch.packed;
    let out = SharedMut::new(y);
    let panels = w.rows / PANEL;
    pool.broadcast(&|t, n| {
        let mut tile: PanelOut = [[0.0; PANEL]; MAX_ACT_ROWS];
        for c0 in (0..m).step_by(ACT_CHUNK) {
            for p in panels * t / n..panels * (t + 1) / n {
                let c1 = (c0 + ACT_CHUNK).min(m);
                for j0 in (c0..c1).step_by(MAX_ACT_ROWS) {
                    let na = (c1 - j0).min(MAX_ACT_ROWS);
                    let job = PanelJob {
                        kind,
                        nb,
                        panel: w.panel(p),
                        acts,
                        j0,
                        na,
                    };
                    kernel(&job, &mut tile);
                    for (j, row) in tile.iter().enumerate().take(na) {
                        // SAFETY: thread t writes only columns of its panels
                        // [P·t/n, P·(t+1)/n), which are disjoint across threads.
                        let dst = unsafe { out.slice_mut((j0 + j) * w.rows + p * PANEL, PANEL) };
                        dst.copy_from_slice(row);
                    }
                }
            }
        }
    });
}
