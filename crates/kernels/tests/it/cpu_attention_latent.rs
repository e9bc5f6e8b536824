//! Multi-head latent attention: a one-head cache of key rows whose leading `value_dim` values
//! are also the value. Checked against the reference attention run on a cache holding the
//! same rows as both keys and values (its output's leading `value_dim` values per head), on
//! every storage format, with several sequences, shuffled block tables, decode and prefill
//! rows, and one and two threads.

use kestrel_kernels::cpu::attention::{
    latent_attention, reference, store_kv, store_latent_many, AttnParams, AttnSeq, KvDtype,
    KvWrite, LatentParams, PagedKv, PagedKvMut,
};
use kestrel_kernels::cpu::ThreadPool;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BLOCK: usize = 4;
const HEAD_DIM: usize = 24;
const VALUE_DIM: usize = 16;
const HEADS: usize = 3;

struct Seq {
    start: usize,
    n: usize,
    table: Vec<u32>,
}

#[test]
fn latent_attention_matches_the_reference_on_the_value_prefix() {
    let mut rng = ChaCha8Rng::seed_from_u64(54);
    // (start position, new tokens): decode rows and prefill chunks, one past a block edge.
    let shape: [(usize, usize); 4] = [(0, 1), (9, 1), (0, 13), (6, 5)];
    let blocks_needed: usize = shape.iter().map(|(s, n)| (s + n).div_ceil(BLOCK)).sum();
    let mut physical: Vec<u32> = (0..blocks_needed as u32).collect();
    physical.reverse();
    let mut next = physical.into_iter();
    let seqs: Vec<Seq> = shape
        .iter()
        .map(|&(start, n)| Seq {
            start,
            n,
            table: (0..(start + n).div_ceil(BLOCK))
                .map(|_| next.next().unwrap())
                .collect(),
        })
        .collect();
    for dtype in KvDtype::ALL {
        let row_bytes = dtype.row_bytes(HEAD_DIM);
        let bytes = blocks_needed * BLOCK * row_bytes;
        let (mut k, mut v) = (vec![0u8; bytes], vec![0u8; bytes]);
        let mut latent_k = vec![0u8; bytes];
        let mut qs = Vec::new();
        for s in &seqs {
            let rows: Vec<f32> = (0..(s.start + s.n) * HEAD_DIM)
                .map(|_| rng.gen_range(-1.0f32..1.0))
                .collect();
            let mut full = PagedKvMut {
                k: &mut k,
                v: &mut v,
                dtype,
                block_size: BLOCK,
                n_kv_heads: 1,
                head_dim: HEAD_DIM,
            };
            for (pos, row) in rows.chunks_exact(HEAD_DIM).enumerate() {
                store_kv(&mut full, &s.table, pos, row, row);
            }
            let mut latent = PagedKvMut {
                k: &mut latent_k,
                v: &mut [],
                dtype,
                block_size: BLOCK,
                n_kv_heads: 1,
                head_dim: HEAD_DIM,
            };
            let write = KvWrite {
                block_table: &s.table,
                start_pos: 0,
                n: s.start + s.n,
            };
            store_latent_many(&mut latent, std::iter::once(write), &rows);
            qs.push(
                (0..s.n * HEADS * HEAD_DIM)
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
            block_size: BLOCK,
            n_kv_heads: 1,
            head_dim: HEAD_DIM,
        };
        let params = AttnParams {
            n_heads: HEADS,
            scale,
            window: None,
            softcap: None,
            alibi: None,
            sinks: None,
        };
        let mut want = vec![0.0; tokens * HEADS * HEAD_DIM];
        reference(&full, &attn_seqs, params, &mut want);
        let latent = PagedKv {
            k: &latent_k,
            v: &[],
            ..full
        };
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            let mut got = vec![f32::NAN; tokens * HEADS * VALUE_DIM];
            let p = LatentParams {
                n_heads: HEADS,
                scale,
                value_dim: VALUE_DIM,
            };
            latent_attention(&pool, &latent, &attn_seqs, p, &mut got);
            for (row, (g, w)) in got
                .chunks_exact(VALUE_DIM)
                .zip(want.chunks_exact(HEAD_DIM))
                .enumerate()
            {
                for (a, b) in g.iter().zip(&w[..VALUE_DIM]) {
                    assert!(
                        (a - b).abs() <= 1e-5,
                        "{dtype} threads {threads} row {row}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
