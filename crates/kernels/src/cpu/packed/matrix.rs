//! [`PackedMatrix`]: a weight matrix repacked into panels (layout in `layout.rs`).

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
    buf: HugeBuffer,
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

impl PackedMatrix {
    /// Packs a row-major GGUF matrix. `None` if `dtype` has no packed layout, `rows` is not a
    /// multiple of [`PANEL`], or `data` is not exactly `rows` rows of `cols` elements.
    pub fn pack(dtype: DType, rows: usize, cols: usize, data: &[u8]) -> Option<PackedMatrix> {
        let kind = PackedKind::of(dtype)?;
        let row_bytes = dtype.row_bytes(cols)?;
        if !rows.is_multiple_of(PANEL) || data.len() != rows * row_bytes {
            return None;
        }
        let panel_stride = (PANEL * row_bytes).div_ceil(64) * 64;
        let mut m = PackedMatrix {
            kind,
            rows,
            cols,
            panel_stride,
            buf: HugeBuffer::zeroed(rows / PANEL * panel_stride),
        };
        let nb = m.blocks();
        let panel_bytes = nb * (kind.quant_bytes() + kind.scale_bytes());
        let pack_from = |first: usize, part: &mut [u8]| {
            for (k, panel) in part.chunks_exact_mut(panel_stride).enumerate() {
                let p = first + k;
                let src: [&[u8]; PANEL] =
                    std::array::from_fn(|r| &data[(p * PANEL + r) * row_bytes..][..row_bytes]);
                pack_panel(kind, nb, &src, &mut panel[..panel_bytes]);
            }
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        if threads < 2 || data.len() < PARALLEL_PACK_BYTES {
            pack_from(0, &mut m.buf);
            return Some(m);
        }
        let per = (rows / PANEL).div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (c, part) in m.buf.chunks_mut(per * panel_stride).enumerate() {
                let pack_from = &pack_from;
                s.spawn(move || pack_from(c * per, part));
            }
        });
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
        self.buf.len()
    }

    pub(super) fn blocks(&self) -> usize {
        self.cols / 32
    }

    fn bytes(&self) -> &[u8] {
        &self.buf
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
