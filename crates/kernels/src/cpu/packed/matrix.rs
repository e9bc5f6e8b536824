//! [`PackedMatrix`]: a weight matrix repacked into panels (layout in `layout.rs`).
//!
//! A matrix owns its buffer, or shares one with the other matrices of its group
//! ([`PackedMatrix::pack_group`]: a mixture-of-experts layer's experts, back to back), so that
//! matrices smaller than a huge page still sit on huge pages.

use std::sync::Arc;

use super::{layout, PackedKind, PANEL};
use crate::huge_buffer::HugeBuffer;
use crate::quant::{self, DType};

/// A `rows × cols` weight matrix in the packed layout.
pub struct PackedMatrix {
    kind: PackedKind,
    rows: usize,
    cols: usize,
    /// Bytes per panel, rounded up to whole 64-byte cache lines (the buffer is page-aligned,
    /// so every panel starts on a line).
    panel_stride: usize,
    /// This matrix's panels are `buf[offset..offset + len]`.
    buf: Arc<HugeBuffer>,
    offset: usize,
    len: usize,
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

/// Matrices at least this large are packed on all cores (threads cost more on small ones).
const PARALLEL_PACK_BYTES: usize = 1 << 20;

/// Packs one panel (`src[r]` = row `r`'s GGUF bytes) into `panel` (quants, then scales).
fn pack_panel(kind: PackedKind, nb: usize, src: &[&[u8]; PANEL], panel: &mut [u8]) {
    let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
    let (quants, scales) = panel.split_at_mut(nb * qb);
    for i in 0..nb {
        let (q, s) = (&mut quants[i * qb..][..qb], &mut scales[i * sb..][..sb]);
        layout::pack_block(kind, src, i, q, s);
    }
}

/// The panels of a group of same-shaped row-major matrices, counted matrix after matrix.
struct PanelSource<'a> {
    kind: PackedKind,
    nb: usize,
    /// Panels per matrix.
    panels: usize,
    row_bytes: usize,
    mats: &'a [&'a [u8]],
}

impl PanelSource<'_> {
    /// Packs every panel into `buf` (`panel_stride` bytes each), on all cores when large.
    fn pack_into(&self, buf: &mut [u8], panel_stride: usize) {
        let total = self.panels * self.mats.len();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let bytes: usize = self.mats.iter().map(|m| m.len()).sum();
        if threads < 2 || bytes < PARALLEL_PACK_BYTES {
            self.pack_from(0, buf, panel_stride);
            return;
        }
        let per = total.div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (c, part) in buf.chunks_mut(per * panel_stride).enumerate() {
                s.spawn(move || self.pack_from(c * per, part, panel_stride));
            }
        });
    }

    /// Packs panels `first..` (global panel numbers) into `part`, one per `panel_stride` bytes.
    fn pack_from(&self, first: usize, part: &mut [u8], panel_stride: usize) {
        let panel_bytes = self.nb * (self.kind.quant_bytes() + self.kind.scale_bytes());
        for (k, panel) in part.chunks_exact_mut(panel_stride).enumerate() {
            let g = first + k;
            let (data, p) = (self.mats[g / self.panels], g % self.panels);
            let rb = self.row_bytes;
            let src: [&[u8]; PANEL] = std::array::from_fn(|r| &data[(p * PANEL + r) * rb..][..rb]);
            pack_panel(self.kind, self.nb, &src, &mut panel[..panel_bytes]);
        }
    }
}

impl PackedMatrix {
    /// Packs a row-major GGUF matrix. `None` if `dtype` has no packed layout, `rows` is not a
    /// multiple of [`PANEL`], or `data` is not exactly `rows` rows of `cols` elements.
    pub fn pack(dtype: DType, rows: usize, cols: usize, data: &[u8]) -> Option<PackedMatrix> {
        Self::pack_group(dtype, rows, cols, &[data])?.pop()
    }

    /// Packs several row-major GGUF matrices of one type and shape into one buffer, back to
    /// back, as [`pack`](Self::pack) would each. `None` under the same conditions, for any of
    /// them.
    pub fn pack_group(
        dtype: DType,
        rows: usize,
        cols: usize,
        mats: &[&[u8]],
    ) -> Option<Vec<PackedMatrix>> {
        let kind = PackedKind::of(dtype)?;
        let row_bytes = dtype.row_bytes(cols)?;
        let sizes_ok = mats.iter().all(|d| d.len() == rows * row_bytes);
        if !rows.is_multiple_of(PANEL) || !sizes_ok {
            return None;
        }
        let panel_stride = (PANEL * row_bytes).div_ceil(64) * 64;
        let len = rows / PANEL * panel_stride;
        let mut buf = HugeBuffer::zeroed(len * mats.len());
        let src = PanelSource {
            kind,
            nb: cols / kind.block_elems(),
            panels: rows / PANEL,
            row_bytes,
            mats,
        };
        src.pack_into(&mut buf, panel_stride);
        let buf = Arc::new(buf);
        let matrix = |i: usize| PackedMatrix {
            kind,
            rows,
            cols,
            panel_stride,
            buf: Arc::clone(&buf),
            offset: i * len,
            len,
        };
        Some((0..mats.len()).map(matrix).collect())
    }

    /// Moves `ms` into one new buffer, back to back (a decoder layer's projections), so that
    /// matrices smaller than a huge page, and the tails of larger ones, sit on huge pages too.
    /// The bytes are copied; each matrix's old buffer is released once nothing else shares it.
    pub fn share_buffer(ms: &mut [&mut PackedMatrix]) {
        let total: usize = ms.iter().map(|m| m.len).sum();
        let mut buf = HugeBuffer::zeroed(total);
        let mut offsets = Vec::with_capacity(ms.len());
        let mut at = 0;
        for m in ms.iter() {
            // Every matrix's length is whole panels of whole cache lines, so each stays
            // line-aligned.
            buf[at..at + m.len].copy_from_slice(m.bytes());
            offsets.push(at);
            at += m.len;
        }
        let buf = Arc::new(buf);
        for (m, offset) in ms.iter_mut().zip(offsets) {
            m.buf = Arc::clone(&buf);
            m.offset = offset;
        }
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
        self.len
    }

    pub(super) fn blocks(&self) -> usize {
        self.cols / self.kind.block_elems()
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.offset..self.offset + self.len]
    }

    /// Panel `p`: its quant bytes, then its scale bytes.
    pub(super) fn panel(&self, p: usize) -> &[u8] {
        let nb = self.blocks();
        let len = nb * (self.kind.quant_bytes() + self.kind.scale_bytes());
        &self.bytes()[p * self.panel_stride..][..len]
    }

    /// Row `r` in its GGUF encoding (`dtype.row_bytes(cols)` bytes into `out`).
    pub fn unpack_row(&self, r: usize, out: &mut [u8]) {
        let (kind, nb) = (self.kind, self.blocks());
        let (qb, sb, bb) = (
            kind.quant_bytes(),
            kind.scale_bytes(),
            layout::block_bytes(kind),
        );
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
