//! Paged flash attention, every ISA variant and every KV dtype, against the naive masked
//! reference (and each quantized dtype's reference against the f32 one within the bound of
//! `attention_common::quant_bound`): decode, prefill and mixed batches, windows, GQA groups,
//! head dims with SIMD tails and the tiled path's tile shapes.

use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_kernels::cpu::ThreadPool;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{run_case, Case, SeqSpec};

#[test]
fn decode_and_prefill_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let pool = ThreadPool::new(3);
    let seq_sets: [Vec<SeqSpec>; 4] = [
        vec![(0, 1)],                             // first token
        vec![(37, 1), (0, 1), (100, 1), (5, 1)],  // decode batch
        vec![(0, 40)],                            // prefill from scratch
        vec![(23, 19), (0, 5), (64, 1), (3, 33)], // mixed: chunks with prior context + decode
    ];
    for dtype in KvDtype::ALL {
        for block_size in [1, 4, 16, 32] {
            for group in [1, 3, 4] {
                for window in [None, Some(1), Some(7), Some(50)] {
                    for seqs in &seq_sets {
                        let c = Case {
                            block_size,
                            n_kv: 2,
                            group,
                            head_dim: 16,
                            window,
                            seqs: seqs.clone(),
                        };
                        run_case(&c, dtype, &pool, &mut rng);
                    }
                }
            }
        }
    }
}

/// Head dims that are and are not multiples of the SIMD widths (the loaders' tails).
#[test]
fn realistic_head_dims() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (n_kv, group, head_dim) in [(3, 3, 64), (1, 4, 128), (2, 1, 80), (1, 2, 36)] {
            let seqs = vec![(300, 1), (130, 20), (0, 17)];
            let c = Case {
                block_size: 16,
                n_kv,
                group,
                head_dim,
                window: None,
                seqs,
            };
            run_case(&c, dtype, &pool, &mut rng);
        }
    }
}

/// Tile shapes of the tiled path: GQA groups whose query rows fill several registers with
/// remainders (group 8 × 16 queries = 128 rows), partial last tiles, key counts that are not
/// a multiple of the key tile (windows, block sizes 5 and 16), and head dims with column
/// tails (100 = 64 + 32 + 4).
#[test]
fn tiled_path_shapes() {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, group, head_dim, window) in [
            (16, 8, 64, None),
            (16, 2, 100, Some(37)),
            (5, 5, 24, Some(9)),
            (16, 1, 64, Some(16)),
        ] {
            let c = Case {
                block_size,
                n_kv: 2,
                group,
                head_dim,
                window,
                seqs: vec![(90, 45), (0, 70), (33, 1), (7, 3)],
            };
            run_case(&c, dtype, &pool, &mut rng);
        }
    }
}
