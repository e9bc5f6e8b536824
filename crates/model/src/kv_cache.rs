//! [`KvCache`]: the paged K/V storage of every layer.
//!
//! Each layer holds two arrays laid out as blocks of `block_size` token slots:
//!
//! ```text
//!   k[layer] = [ block 0 | block 1 | ... | block N-1 ]
//!   block b  = [ slot 0 | slot 1 | ... | slot block_size-1 ]
//!   slot     = [ kv head 0: head_dim f32 | kv head 1 | ... ]
//! ```
//!
//! A sequence's token at position `p` lives in block `block_table[p / block_size]`, slot
//! `p % block_size`. The engine owns the block tables; this type only owns the memory.

use kestrel_kernels::cpu::attention::{PagedKv, PagedKvMut};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheShape {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub num_blocks: usize,
}

impl KvCacheShape {
    /// Bytes one token occupies across all layers (K and V).
    pub fn bytes_per_token(&self) -> usize {
        self.n_layers * 2 * self.n_kv_heads * self.head_dim * std::mem::size_of::<f32>()
    }

    /// How many whole blocks fit in `bytes`.
    pub fn blocks_for_bytes(&self, bytes: usize) -> usize {
        bytes / (self.bytes_per_token() * self.block_size)
    }

    fn floats_per_layer(&self) -> usize {
        self.num_blocks * self.block_size * self.n_kv_heads * self.head_dim
    }
}

pub struct KvCache {
    shape: KvCacheShape,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl KvCache {
    /// Allocate (zeroed) storage for `shape`.
    pub fn new(shape: KvCacheShape) -> KvCache {
        let n = shape.floats_per_layer();
        KvCache {
            shape,
            k: (0..shape.n_layers).map(|_| vec![0.0; n]).collect(),
            v: (0..shape.n_layers).map(|_| vec![0.0; n]).collect(),
        }
    }

    pub fn shape(&self) -> KvCacheShape {
        self.shape
    }

    /// Total bytes of K/V storage.
    pub fn n_bytes(&self) -> usize {
        2 * self.shape.n_layers * self.shape.floats_per_layer() * std::mem::size_of::<f32>()
    }

    pub fn layer(&self, layer: usize) -> PagedKv<'_> {
        PagedKv {
            k: &self.k[layer],
            v: &self.v[layer],
            block_size: self.shape.block_size,
            n_kv_heads: self.shape.n_kv_heads,
            head_dim: self.shape.head_dim,
        }
    }

    pub fn layer_mut(&mut self, layer: usize) -> PagedKvMut<'_> {
        PagedKvMut {
            k: &mut self.k[layer],
            v: &mut self.v[layer],
            block_size: self.shape.block_size,
            n_kv_heads: self.shape.n_kv_heads,
            head_dim: self.shape.head_dim,
        }
    }
}
