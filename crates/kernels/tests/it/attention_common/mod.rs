//! Shared by the `cpu_attention_*` tests: a paged KV cache filled through `store_kv` with
//! blocks handed out in random order, an f32 copy of the same tokens, random queries, and
//! [`run_case`], which checks every ISA variant against the naive masked reference (and a
//! quantized dtype's reference against the f32 one within the bound of `quant_bound.rs`).

mod quant_bound;

pub use quant_bound::{run_case, run_case_with};

use kestrel_kernels::cpu::attention::{
    store_kv, AttnParams, AttnSeq, KvDtype, PagedKv, PagedKvMut,
};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Sequence spec: (prior context = q_start_pos, n_q).
pub type SeqSpec = (usize, usize);

/// A released block's placeholder in a block table (any out-of-range id).
pub const HOLE: u32 = u32::MAX;

#[derive(Clone)]
pub struct Case {
    pub block_size: usize,
    pub n_kv: usize,
    pub group: usize,
    pub head_dim: usize,
    pub window: Option<usize>,
    pub seqs: Vec<SeqSpec>,
}

/// One layer's K/V bytes in `dtype`, starting `skew` bytes into the buffers (to test
/// unaligned storage).
pub struct Cache {
    k: Vec<u8>,
    v: Vec<u8>,
    skew: usize,
    dtype: KvDtype,
    block_size: usize,
    n_kv: usize,
    head_dim: usize,
}

impl Cache {
    pub fn new(c: &Case, dtype: KvDtype, num_blocks: usize, skew: usize) -> Cache {
        let len = skew + num_blocks * c.block_size * c.n_kv * dtype.row_bytes(c.head_dim);
        Cache {
            k: vec![0xff; len],
            v: vec![0xff; len],
            skew,
            dtype,
            block_size: c.block_size,
            n_kv: c.n_kv,
            head_dim: c.head_dim,
        }
    }

    pub fn view(&self) -> PagedKv<'_> {
        PagedKv {
            k: &self.k[self.skew..],
            v: &self.v[self.skew..],
            dtype: self.dtype,
            block_size: self.block_size,
            n_kv_heads: self.n_kv,
            head_dim: self.head_dim,
        }
    }

    pub fn view_mut(&mut self) -> PagedKvMut<'_> {
        PagedKvMut {
            k: &mut self.k[self.skew..],
            v: &mut self.v[self.skew..],
            dtype: self.dtype,
            block_size: self.block_size,
            n_kv_heads: self.n_kv,
            head_dim: self.head_dim,
        }
    }
}

/// The cache under test and an f32 copy of the same tokens; `orig[s][pos]` holds the
/// unquantized (k, v) rows of sequence `s`.
pub struct Built {
    pub cache: Cache,
    pub exact: Cache,
    pub orig: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
    pub tables: Vec<Vec<u32>>,
    pub qs: Vec<Vec<f32>>,
}

/// A cache with blocks handed out in random order, every token stored through `store_kv`.
pub fn build(c: &Case, dtype: KvDtype, skew: usize, rng: &mut ChaCha8Rng) -> Built {
    let row = c.n_kv * c.head_dim;
    let needs: Vec<usize> = c
        .seqs
        .iter()
        .map(|&(p, n)| (p + n).div_ceil(c.block_size))
        .collect();
    let num_blocks = needs.iter().sum::<usize>() + 3;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let mut cache = Cache::new(c, dtype, num_blocks, skew);
    let mut exact = Cache::new(c, KvDtype::F32, num_blocks, 0);
    let (mut tables, mut orig) = (Vec::new(), Vec::new());
    let mut ids = ids.into_iter();
    for (&(p, n), &need) in c.seqs.iter().zip(&needs) {
        let table: Vec<u32> = ids.by_ref().take(need).collect();
        let mut rows = Vec::new();
        for pos in 0..p + n {
            let kr: Vec<f32> = (0..row).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let vr: Vec<f32> = (0..row).map(|_| rng.gen_range(-1.0..1.0)).collect();
            store_kv(&mut cache.view_mut(), &table, pos, &kr, &vr);
            store_kv(&mut exact.view_mut(), &table, pos, &kr, &vr);
            rows.push((kr, vr));
        }
        tables.push(table);
        orig.push(rows);
    }
    let n_heads = c.n_kv * c.group;
    let qs = c
        .seqs
        .iter()
        .map(|&(_, n)| {
            (0..n * n_heads * c.head_dim)
                .map(|_| rng.gen_range(-2.0..2.0))
                .collect()
        })
        .collect();
    Built {
        cache,
        exact,
        orig,
        tables,
        qs,
    }
}

pub fn seqs_of<'a>(c: &Case, b: &'a Built) -> Vec<AttnSeq<'a>> {
    c.seqs
        .iter()
        .enumerate()
        .map(|(i, &(p, n))| AttnSeq {
            q: &b.qs[i],
            n_q: n,
            q_start_pos: p,
            block_table: &b.tables[i],
        })
        .collect()
}

pub fn params_of(c: &Case) -> AttnParams<'static> {
    AttnParams {
        n_heads: c.n_kv * c.group,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
        window: c.window,
        alibi: None,
        softcap: None,
        sinks: None,
    }
}
