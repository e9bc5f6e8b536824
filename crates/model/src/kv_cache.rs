//! [`KvCache`]: the paged K/V storage of every layer.
//!
//! Each layer holds two byte arrays laid out as blocks of `block_size` token slots:
//!
//! ```text
//!   v[layer] = [ block 0 | block 1 | ... | block N-1 ]
//!   block b  = [ slot 0 | slot 1 | ... | slot block_size-1 ]
//!   slot     = [ kv head 0: one head row | kv head 1 | ... ]
//!   head row = dtype.row_bytes(head_dim) bytes: f32 4·hd, f16 2·hd, q8 4 + hd (scale + int8)
//!
//!   k[layer] = the same blocks, each [ kv head 0's key tile | kv head 1's | ... ]: the
//!              block_size rows of one kv head stored dimension-major (the kernels' key tile)
//! ```
//!
//! With `keys_only` (latent attention, DeepSeek) a layer has one "kv head" whose key row holds
//! the compressed latent and the rotary key, the value being the row's latent prefix: the `v`
//! arrays are empty and a token costs one row per layer.
//!
//! A sequence's token at position `p` lives in block `block_table[p / block_size]`, slot
//! `p % block_size`. The engine owns the block tables; this type only owns the memory. The
//! storage type ([`KvDtype`]) is chosen once, when the cache is allocated.

use kestrel_kernels::cpu::attention::{KvDtype, PagedKv, PagedKvMut};
use kestrel_kernels::huge_buffer::HugeBuffer;

/// The geometry and storage type of a [`KvCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheShape {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub num_blocks: usize,
    /// How each head row is stored.
    pub dtype: KvDtype,
    /// No value rows: each key row's prefix is its value (latent attention).
    pub keys_only: bool,
}

impl KvCacheShape {
    /// Bytes one token occupies across all layers (K and V; K alone with `keys_only`).
    /// Saturates rather than overflows for absurd shapes (which then fit no block).
    pub fn bytes_per_token(&self) -> usize {
        self.n_layers
            .saturating_mul(self.arrays())
            .saturating_mul(self.n_kv_heads)
            .saturating_mul(self.dtype.row_bytes(self.head_dim))
    }

    /// How many whole blocks fit in `bytes` (0 for a zero block size or a block too large to
    /// count).
    pub fn blocks_for_bytes(&self, bytes: usize) -> usize {
        self.bytes_per_token()
            .checked_mul(self.block_size)
            .and_then(|per_block| bytes.checked_div(per_block))
            .unwrap_or(0)
    }

    /// Bytes of one layer's K (or V) array.
    fn bytes_per_layer(&self) -> usize {
        self.num_blocks * self.block_size * self.n_kv_heads * self.dtype.row_bytes(self.head_dim)
    }

    /// Arrays per layer: K and V, or K alone.
    fn arrays(&self) -> usize {
        match self.keys_only {
            true => 1,
            false => 2,
        }
    }

    /// Bytes of one layer's V array.
    fn value_bytes_per_layer(&self) -> usize {
        match self.keys_only {
            true => 0,
            false => self.bytes_per_layer(),
        }
    }
}

/// The K/V memory of every layer, in the layout of the module docs.
///
/// Each layer's K and V bytes are a [`HugeBuffer`]: page-aligned (so an f32 cache is 4-byte
/// aligned and the attention kernel reads it in place) and, when large, on transparent huge
/// pages. Decode attention reads a few hundred bytes from each of a sequence's blocks, which the
/// block tables scatter over the layer's array: with 4 KiB pages nearly every block read is a
/// TLB miss.
pub struct KvCache {
    shape: KvCacheShape,
    k: Vec<HugeBuffer>,
    v: Vec<HugeBuffer>,
}

impl KvCache {
    /// Allocate (zeroed) storage for `shape`.
    pub fn new(shape: KvCacheShape) -> KvCache {
        let (n, nv) = (shape.bytes_per_layer(), shape.value_bytes_per_layer());
        KvCache {
            shape,
            k: (0..shape.n_layers).map(|_| HugeBuffer::zeroed(n)).collect(),
            v: (0..shape.n_layers)
                .map(|_| HugeBuffer::zeroed(nv))
                .collect(),
        }
    }

    pub fn shape(&self) -> KvCacheShape {
        self.shape
    }

    /// Total bytes of K/V storage.
    pub fn n_bytes(&self) -> usize {
        self.shape.arrays() * self.shape.n_layers * self.shape.bytes_per_layer()
    }

    /// Bytes of one block in one layer's K (or V) array.
    fn block_bytes_per_layer(&self) -> usize {
        self.shape.block_size
            * self.shape.n_kv_heads
            * self.shape.dtype.row_bytes(self.shape.head_dim)
    }

    /// The byte range of block `block` in a layer's K or V array, if the block exists.
    fn block_range(&self, block: usize) -> Option<std::ops::Range<usize>> {
        let n = self.block_bytes_per_layer();
        (block < self.shape.num_blocks).then(|| block * n..(block + 1) * n)
    }

    /// The byte range of block `block` in a layer's V array (empty with `keys_only`).
    fn value_range(&self, block: usize) -> std::ops::Range<usize> {
        match self.shape.keys_only {
            true => 0..0,
            false => self.block_range(block).unwrap_or(0..0),
        }
    }

    /// A copy of block `block` in every layer: each layer's K bytes, then its V bytes.
    pub fn block_bytes(&self, block: usize) -> Option<Vec<u8>> {
        let range = self.block_range(block)?;
        let vr = self.value_range(block);
        let mut out = Vec::with_capacity(self.shape.n_layers * (range.len() + vr.len()));
        for (k, v) in self.k.iter().zip(&self.v) {
            out.extend_from_slice(&k[range.clone()]);
            out.extend_from_slice(&v[vr.clone()]);
        }
        Some(out)
    }

    /// Writes a copy made by [`KvCache::block_bytes`] into block `block`; false, with nothing
    /// written, if the block does not exist or `bytes` is not one block's length.
    pub fn set_block_bytes(&mut self, block: usize, bytes: &[u8]) -> bool {
        let Some(range) = self.block_range(block) else {
            return false;
        };
        let vr = self.value_range(block);
        let per_layer = range.len() + vr.len();
        if bytes.len() != self.shape.n_layers * per_layer {
            return false;
        }
        for ((k, v), layer) in self
            .k
            .iter_mut()
            .zip(self.v.iter_mut())
            .zip(bytes.chunks_exact(per_layer))
        {
            let (kb, vb) = layer.split_at(range.len());
            k[range.clone()].copy_from_slice(kb);
            v[vr.clone()].copy_from_slice(vb);
        }
        true
    }

    /// Layer `layer`'s cache, for the attention kernel.
    pub fn layer(&self, layer: usize) -> PagedKv<'_> {
        PagedKv {
            k: &self.k[layer],
            v: &self.v[layer],
            dtype: self.shape.dtype,
            block_size: self.shape.block_size,
            n_kv_heads: self.shape.n_kv_heads,
            head_dim: self.shape.head_dim,
        }
    }

    /// Layer `layer`'s cache, for `store_kv`.
    pub fn layer_mut(&mut self, layer: usize) -> PagedKvMut<'_> {
        PagedKvMut {
            k: &mut self.k[layer],
            v: &mut self.v[layer],
            dtype: self.shape.dtype,
            block_size: self.shape.block_size,
            n_kv_heads: self.shape.n_kv_heads,
            head_dim: self.shape.head_dim,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(dtype: KvDtype) -> KvCacheShape {
        // SmolLM2-135M: 30 layers, 3 kv heads of 64.
        KvCacheShape {
            n_layers: 30,
            n_kv_heads: 3,
            head_dim: 64,
            block_size: 16,
            num_blocks: 4,
            dtype,
            keys_only: false,
        }
    }

    #[test]
    fn a_block_copied_out_and_back_lands_in_its_place_only() {
        let mut cache = KvCache::new(KvCacheShape {
            n_layers: 2,
            ..shape(KvDtype::F16)
        });
        let n = 2 * 2 * 16 * 3 * KvDtype::F16.row_bytes(64);
        let bytes: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        assert!(cache.set_block_bytes(2, &bytes));
        assert_eq!(cache.block_bytes(2).as_deref(), Some(bytes.as_slice()));
        assert!(cache.block_bytes(1).unwrap().iter().all(|&b| b == 0));
        assert!(cache.block_bytes(3).unwrap().iter().all(|&b| b == 0));
        assert!(!cache.set_block_bytes(4, &bytes), "no block 4");
        assert!(!cache.set_block_bytes(0, &bytes[1..]), "wrong length");
        assert!(cache.block_bytes(4).is_none());
    }

    #[test]
    fn bytes_per_token_follows_the_dtype() {
        let f32 = shape(KvDtype::F32).bytes_per_token();
        assert_eq!(f32, 30 * 2 * 3 * 64 * 4);
        assert_eq!(shape(KvDtype::F16).bytes_per_token() * 2, f32);
        assert_eq!(shape(KvDtype::Q8).bytes_per_token(), 30 * 2 * 3 * (64 + 4));
    }

    /// DeepSeek-V2-Lite's latent cache: 27 layers of one 512 + 64 row, against the same model
    /// with plain attention (16 heads, keys of 192 and values of 128, as 16 kv heads of 192).
    #[test]
    fn a_keys_only_cache_holds_one_row_per_token_and_copies_its_blocks() {
        let latent = KvCacheShape {
            n_layers: 27,
            n_kv_heads: 1,
            head_dim: 576,
            keys_only: true,
            ..shape(KvDtype::F16)
        };
        assert_eq!(latent.bytes_per_token(), 27 * 576 * 2);
        let plain = KvCacheShape {
            n_kv_heads: 16,
            head_dim: 192,
            keys_only: false,
            ..latent
        };
        assert_eq!(plain.bytes_per_token(), 27 * 2 * 16 * 192 * 2);
        let mut cache = KvCache::new(KvCacheShape {
            n_layers: 2,
            ..latent
        });
        assert_eq!(cache.n_bytes(), 2 * 4 * 16 * 576 * 2);
        assert!(cache.layer(0).v.is_empty());
        let n = 2 * 16 * 576 * 2;
        let bytes: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
        assert!(cache.set_block_bytes(1, &bytes));
        assert_eq!(cache.block_bytes(1).as_deref(), Some(bytes.as_slice()));
        assert!(cache.block_bytes(0).unwrap().iter().all(|&b| b == 0));
        assert!(!cache.set_block_bytes(1, &bytes[..n - 1]), "wrong length");
    }

    #[test]
    fn zero_block_size_and_absurd_shapes_fit_no_block() {
        let zero = KvCacheShape {
            block_size: 0,
            ..shape(KvDtype::F32)
        };
        assert_eq!(zero.blocks_for_bytes(1 << 30), 0);
        let huge = KvCacheShape {
            n_layers: usize::MAX / 2,
            ..shape(KvDtype::F32)
        };
        assert_eq!(huge.bytes_per_token(), usize::MAX);
        assert_eq!(huge.blocks_for_bytes(usize::MAX), 0);
    }

    #[test]
    fn blocks_for_bytes_grows_as_rows_shrink() {
        let budget = 1 << 30;
        let blocks = |d| shape(d).blocks_for_bytes(budget);
        assert_eq!(blocks(KvDtype::F32), budget / (30 * 2 * 3 * 256 * 16));
        assert!(blocks(KvDtype::F16) >= 2 * blocks(KvDtype::F32));
        assert!(
            blocks(KvDtype::Q8) * 100 >= 376 * blocks(KvDtype::F32),
            "256/68 ≈ 3.76x"
        );
    }

    #[test]
    fn layers_have_the_shape_size_and_an_aligned_f32_view() {
        for d in KvDtype::ALL {
            let mut cache = KvCache::new(KvCacheShape {
                n_layers: 2,
                head_dim: 5,
                ..shape(d)
            });
            let per_layer = 4 * 16 * 3 * d.row_bytes(5);
            assert_eq!(cache.n_bytes(), 2 * 2 * per_layer);
            assert_eq!(cache.layer(1).k.len(), per_layer);
            assert_eq!(cache.layer_mut(0).v.len(), per_layer);
            assert_eq!(cache.layer(0).dtype, d);
            assert_eq!(cache.layer(0).k.as_ptr() as usize % 4, 0);
        }
    }
}
