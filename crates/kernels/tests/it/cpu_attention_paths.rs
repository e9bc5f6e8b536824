//! A query's output does not depend on the path that computes it: a unit of several queries
//! (the tiled path, rows in the lanes) and the same queries one at a time (the decode path,
//! keys in the lanes) give bit-identical outputs, for every ISA variant and KV dtype, with
//! windows, soft-capping and ALiBi. Speculative decoding relies on this: its verify batch
//! must pick exactly the tokens plain decoding picks.

use kestrel_kernels::cpu::attention::{attention_with, Alibi, AttnSeq, KvDtype};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{build, params_of, seqs_of, Case};

#[test]
fn one_query_at_a_time_is_bit_identical_to_a_batch_of_queries() {
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, group, head_dim, window) in [
            (16, 3, 64, None),
            (5, 4, 24, Some(9)),
            (16, 8, 100, Some(37)),
            (32, 1, 16, None),
            (8, 5, 36, Some(20)),
            (12, 2, 48, Some(30)),
            (16, 6, 72, None),
        ] {
            let c = Case {
                block_size,
                n_kv: 2,
                group,
                head_dim,
                window,
                seqs: vec![(40, 6), (0, 3), (17, 16)],
            };
            let b = build(&c, dtype, 0, &mut rng);
            for extra in 0..3 {
                let mut params = params_of(&c);
                match extra {
                    1 => params.softcap = Some(0.7),
                    2 => params.alibi = Some(Alibi::STANDARD),
                    _ => {}
                }
                let seqs = seqs_of(&c, &b);
                let row = params.n_heads * head_dim;
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
                            let same = alone
                                .iter()
                                .zip(want)
                                .all(|(a, w)| a.to_bits() == w.to_bits());
                            assert!(
                                same,
                                "{dtype} {isa:?} bs={block_size} group={group} hd={head_dim} \
                                 window={window:?} extra={extra} query {} of a {}-query batch: \
                                 {alone:?} vs {want:?}",
                                i, s.n_q
                            );
                        }
                        base += s.q.len();
                    }
                }
            }
        }
    }
}
