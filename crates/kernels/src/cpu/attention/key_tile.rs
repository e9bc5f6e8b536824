//! [`KeyTile`]: how the keys of one (block, kv head) are laid out in the paged cache. Values
//! are stored transposed, dimension-major, so that one load gives the same dimension of
//! consecutive keys, and a decode query scores a whole register of keys per
//! multiply-add (see [`super::decode`]):
//!
//! ```text
//!   K tile of (physical block pb, kv head h), at byte (pb·n_kv + h) · bs · row_bytes:
//!     [ header of slot 0 | ... | header of slot bs-1 ]      bs · OFFSET bytes (q8 scales)
//!     [ d=0: slot 0 .. bs-1 | d=1: slot 0 .. bs-1 | ... ]   hd · bs values of SIZE bytes
//! ```
//!
//! Each key row holds exactly the bytes [`KvDtype::encode_row`] writes (header, then `hd`
//! values); only their places differ, so the formats' spec is unchanged. Values stay
//! row-major (`[slot][kv head][row]`, the module docs of [`super`]).

use super::kv_dtype::{KvDtype, Q8_SCALE_BYTES};

/// The key tile geometry of one cache (see the module docs).
#[derive(Clone, Copy)]
pub(super) struct KeyTile {
    pub block_size: usize,
    pub head_dim: usize,
    pub dtype: KvDtype,
}

impl KeyTile {
    /// Header bytes per key (the q8 scale).
    pub fn header(&self) -> usize {
        match self.dtype {
            KvDtype::Q8 => Q8_SCALE_BYTES,
            KvDtype::F32 | KvDtype::F16 => 0,
        }
    }

    /// Bytes per value.
    pub fn value_size(&self) -> usize {
        match self.dtype {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
            KvDtype::Q8 => 1,
        }
    }

    /// Bytes of one tile: `block_size` key rows.
    pub fn bytes(&self) -> usize {
        self.block_size * self.dtype.row_bytes(self.head_dim)
    }

    /// Byte offset of the tile of physical block `block`, kv head `head`, in a layer's `k`.
    pub fn offset(&self, block: usize, head: usize, n_kv_heads: usize) -> usize {
        (block * n_kv_heads + head) * self.bytes()
    }

    /// Byte offset, in a tile, of slot `slot`'s header.
    pub fn header_at(&self, slot: usize) -> usize {
        slot * self.header()
    }

    /// Byte offset, in a tile, of dimension `d` of slot `slot`.
    pub fn value_at(&self, d: usize, slot: usize) -> usize {
        self.block_size * self.header() + (d * self.block_size + slot) * self.value_size()
    }

    /// Writes the encoded key row `row` (`row_bytes` bytes) into slot `slot` of `tile`.
    pub fn scatter(&self, row: &[u8], slot: usize, tile: &mut [u8]) {
        let (h, size) = (self.header(), self.value_size());
        assert!(
            row.len() == self.dtype.row_bytes(self.head_dim) && tile.len() == self.bytes(),
            "key tile: row or tile size"
        );
        let (header, values) = row.split_at(h);
        tile[self.header_at(slot)..][..h].copy_from_slice(header);
        for (d, v) in values.chunks_exact(size).enumerate() {
            tile[self.value_at(d, slot)..][..size].copy_from_slice(v);
        }
    }

    /// Reads slot `slot` of `tile` back into an encoded key row (`row_bytes` bytes).
    pub fn gather(&self, tile: &[u8], slot: usize, row: &mut [u8]) {
        let (h, size) = (self.header(), self.value_size());
        assert!(
            row.len() == self.dtype.row_bytes(self.head_dim) && tile.len() == self.bytes(),
            "key tile: row or tile size"
        );
        let (header, values) = row.split_at_mut(h);
        header.copy_from_slice(&tile[self.header_at(slot)..][..h]);
        for (d, v) in values.chunks_exact_mut(size).enumerate() {
            v.copy_from_slice(&tile[self.value_at(d, slot)..][..size]);
        }
    }
}
