//! Multi-head latent attention: a one-head cache of key rows whose leading `value_dim` values
//! are also the value. Checked against the reference attention run on a cache holding the
//! same rows as both keys and values (its output's leading `value_dim` values per head), on
//! every storage format, with several sequences, shuffled block tables, decode and prefill
//! rows, one and two threads, and every kernel variant this CPU runs (the scalar reference and
//! the SIMD ones), on a small geometry and on one with full 16-lane tiles and ragged tails.

use kestrel_kernels::cpu::attention::{
    latent_attention_with, reference, store_kv, store_latent_many, AttnParams, AttnSeq, KvDtype,
    KvWrite, LatentParams, PagedKv, PagedKvMut,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Cache block size, key row width, latent (value) width, query heads.
#[derive(Clone, Copy)]
struct Geometry {
    block: usize,
    head_dim: usize,
    value_dim: usize,
    heads: usize,
}

struct Seq {
    start: usize,
    n: usize,
    table: Vec<u32>,
}

#[test]
fn latent_attention_matches_the_reference_on_the_value_prefix() {
    // (start position, new tokens): decode rows and prefill chunks, one past a block edge.
    let small = Geometry {
        block: 4,
        head_dim: 24,
        value_dim: 16,
        heads: 3,
    };
    check(small, &[(0, 1), (9, 1), (0, 13), (6, 5)]);
    // Full 16-key blocks (whole 16-lane vectors in the SIMD variants' products), partial last
    // blocks, odd row widths.
    let wide = Geometry {
        block: 16,
        head_dim: 73,
        value_dim: 57,
        heads: 4,
    };
    check(wide, &[(0, 1), (40, 1), (0, 37), (16, 20)]);
}

fn check(g: Geometry, shape: &[(usize, usize)]) {
    let Geometry {
        block,
        head_dim,
        value_dim,
        heads,
    } = g;
    let mut rng = ChaCha8Rng::seed_from_u64(54);
    let blocks_needed: usize = shape.iter().map(|(s, n)| (s + n).div_ceil(block)).sum();
    let mut physical: Vec<u32> = (0..blocks_needed as u32).collect();
    physical.reverse();
    let mut next = physical.into_iter();
    let seqs: Vec<Seq> = shape
        .iter()
        .map(|&(start, n)| Seq {
            start,
            n,
            table: (0..(start + n).div_ceil(block))
                .map(|_| next.next().unwrap())
                .collect(),
        })
        .collect();
    for dtype in KvDtype::ALL {
        let row_bytes = dtype.row_bytes(head_dim);
        let bytes = blocks_needed * block * row_bytes;
        let (mut k, mut v) = (vec![0u8; bytes], vec![0u8; bytes]);
        let mut latent_k = vec![0u8; bytes];
        let mut qs = Vec::new();
        for s in &seqs {
            let rows: Vec<f32> = (0..(s.start + s.n) * head_dim)
                .map(|_| rng.gen_range(-1.0f32..1.0))
                .collect();
            let mut full = PagedKvMut {
                k: &mut k,
                v: &mut v,
                dtype,
                block_size: block,
                n_kv_heads: 1,
                head_dim,
            };
            for (pos, row) in rows.chunks_exact(head_dim).enumerate() {
                store_kv(&mut full, &s.table, pos, row, row);
            }
            let mut latent = PagedKvMut {
                k: &mut latent_k,
                v: &mut [],
                dtype,
                block_size: block,
                n_kv_heads: 1,
                head_dim,
            };
            let write = KvWrite {
                block_table: &s.table,
                start_pos: 0,
                n: s.start + s.n,
            };
            store_latent_many(&mut latent, std::iter::once(write), &rows);
            qs.push(
                (0..s.n * heads * head_dim)
                    .map(|_| rng.gen_range(-2.0f32..2.0))
                    .collect::<Vec<f32>>(),
            );
        }
        let attn_seqs: Vec<AttnSeq<'_>> = seqs
            .iter()
            .zip(&qs)
            .map(|(s, q)| AttnSeq {
                q,
                n_q: s.n,
                q_start_pos: s.start,
                block_table: &s.table,
            })
            .collect();
        let tokens: usize = seqs.iter().map(|s| s.n).sum();
        let scale = 0.3;
        let full = PagedKv {
            k: &k,
            v: &v,
            dtype,
            block_size: block,
            n_kv_heads: 1,
            head_dim,
        };
        let params = AttnParams {
            n_heads: heads,
            scale,
            window: None,
            softcap: None,
            alibi: None,
            sinks: None,
        };
        let mut want = vec![0.0; tokens * heads * head_dim];
        reference(&full, &attn_seqs, params, &mut want);
        let latent = PagedKv {
            k: &latent_k,
            v: &[],
            ..full
        };
        for (threads, isa) in [1, 2]
            .into_iter()
            .flat_map(|t| Isa::available().into_iter().map(move |i| (t, i)))
        {
            let pool = ThreadPool::new(threads);
            let mut got = vec![f32::NAN; tokens * heads * value_dim];
            let p = LatentParams {
                n_heads: heads,
                scale,
                value_dim,
            };
            latent_attention_with(isa, &pool, &latent, &attn_seqs, p, &mut got);
            for (row, (g, w)) in got
                .chunks_exact(value_dim)
                .zip(want.chunks_exact(head_dim))
                .enumerate()
            {
                for (a, b) in g.iter().zip(&w[..value_dim]) {
                    assert!(
                        (a - b).abs() <= 1e-5,
                        "{dtype} {isa:?} threads {threads} row {row}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
