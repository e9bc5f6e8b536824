//! Long contexts, split into key chunks ([`KEY_CHUNK`] keys, aligned on absolute positions):
//! every ISA variant and KV dtype against the reference across several chunks (query
//! tiles straddling a chunk boundary, a sliding window starting mid-chunk, ALiBi,
//! soft-capping, MQA); a decode, whose chunks run as separate work units, bit-identical to
//! the same query inside a tile (which walks its chunks in turn); and a sequence's output
//! bit-identical alone or batched with others, on 1, 2 or 3 threads.

use kestrel_kernels::cpu::attention::{
    attention_with, Alibi, AttnParams, AttnSeq, KvDtype, KEY_CHUNK,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{build, params_of, run_case_with, seqs_of, Case};

const K: usize = KEY_CHUNK;

/// Plain scores, soft-capped ones, or ALiBi biases.
fn with_extra(c: &Case, extra: usize) -> AttnParams<'static> {
    let mut p = params_of(c);
    match extra {
        1 => p.softcap = Some(0.7),
        2 => p.alibi = Some(Alibi::STANDARD),
        _ => {}
    }
    p
}

#[test]
fn long_contexts_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, n_kv, group, head_dim, window, seqs) in [
            // MQA decode over three chunks, the query mid-chunk.
            (16, 1, 4, 64, None, vec![(2 * K + 300, 1)]),
            // A window starting mid-chunk; a tile straddling a chunk boundary.
            (
                32,
                2,
                3,
                64,
                Some(K + K / 2),
                vec![(3 * K - 5, 1), (K - 8, 20), (2 * K + 40, 1)],
            ),
            // A block size that does not divide the chunk (chunks of whole blocks).
            (
                5,
                2,
                2,
                24,
                Some(K + 50),
                vec![(2 * K + 7, 1), (K - 13, 30)],
            ),
        ] {
            let c = Case {
                block_size,
                n_kv,
                group,
                head_dim,
                window,
                seqs,
            };
            for extra in 0..3 {
                run_case_with(&c, dtype, &pool, &mut rng, with_extra(&c, extra));
            }
        }
    }
}

/// Every query of some multi-chunk tiles, run alone (the decode path, its chunks as
/// separate units) and inside the tile (the tiled path): bit-identical.
#[test]
fn chunked_decode_is_bit_identical_to_tiled() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, group, window) in [(16, 3, None), (32, 4, Some(K + 100)), (5, 1, None)] {
            let c = Case {
                block_size,
                n_kv: 2,
                group,
                head_dim: 64,
                window,
                seqs: vec![(K - 6, 12), (2 * K + 3, 5)],
            };
            let b = build(&c, dtype, 0, &mut rng);
            for extra in 0..3 {
                let params = with_extra(&c, extra);
                let seqs = seqs_of(&c, &b);
                let row = params.n_heads * c.head_dim;
                let total: usize = b.qs.iter().map(Vec::len).sum();
                for isa in Isa::available() {
                    let mut batch = vec![f32::NAN; total];
                    attention_with(isa, &pool, &b.cache.view(), &seqs, params, &mut batch);
                    let mut base = 0;
                    for s in &seqs {
                        for i in 0..s.n_q {
                            let one = AttnSeq {
                                q: &s.q[i * row..(i + 1) * row],
                                n_q: 1,
                                q_start_pos: s.q_start_pos + i,
                                block_table: s.block_table,
                            };
                            let mut alone = vec![f32::NAN; row];
                            attention_with(isa, &pool, &b.cache.view(), &[one], params, &mut alone);
                            let want = &batch[base + i * row..][..row];
                            assert!(
                                bits_equal(&alone, want),
                                "{dtype} {isa:?} bs={block_size} group={group} window={window:?} \
                                 extra={extra} query at {}",
                                s.q_start_pos + i
                            );
                        }
                        base += s.q.len();
                    }
                }
            }
        }
    }
}

/// A long decode's output does not depend on the batch around it or the thread count.
#[test]
fn chunked_decode_is_batch_and_thread_invariant() {
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let pools = [1, 2, 3].map(ThreadPool::new);
    for dtype in KvDtype::ALL {
        for (n_kv, group) in [(3, 3), (1, 4)] {
            let c = Case {
                block_size: 16,
                n_kv,
                group,
                head_dim: 64,
                window: None,
                seqs: vec![(3 * K + 11, 1), (100, 1), (K + 1, 1), (K - 4, 9)],
            };
            let b = build(&c, dtype, 0, &mut rng);
            let seqs = seqs_of(&c, &b);
            for extra in 0..3 {
                let params = with_extra(&c, extra);
                let total: usize = b.qs.iter().map(Vec::len).sum();
                for isa in Isa::available() {
                    let run = |pool: &ThreadPool, seqs: &[AttnSeq<'_>], len| {
                        let mut out = vec![f32::NAN; len];
                        attention_with(isa, pool, &b.cache.view(), seqs, params, &mut out);
                        out
                    };
                    let alone = run(&pools[0], &seqs[..1], seqs[0].q.len());
                    for pool in &pools {
                        let batched = run(pool, &seqs, total);
                        let first = run(pool, &seqs[..1], seqs[0].q.len());
                        assert!(
                            bits_equal(&alone, &batched[..alone.len()])
                                && bits_equal(&alone, &first),
                            "{dtype} {isa:?} n_kv={n_kv} extra={extra} threads={}",
                            pool.n_threads()
                        );
                    }
                }
            }
        }
    }
}

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
