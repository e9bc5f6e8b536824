//! Attention's work split over the thread pool: the result does not depend on the thread
//! count, including the portable path's per-query-head split of a single decode.

use kestrel_kernels::cpu::attention::{self, KvDtype};
use kestrel_kernels::cpu::ThreadPool;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{build, run_case, seqs_of, Case};

#[test]
fn result_is_independent_of_thread_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let c = Case {
        block_size: 8,
        n_kv: 3,
        group: 3,
        head_dim: 32,
        window: None,
        seqs: vec![(50, 30), (10, 1)],
    };
    for dtype in KvDtype::ALL {
        let b = build(&c, dtype, 0, &mut rng);
        let seqs = seqs_of(&c, &b);
        let total: usize = b.qs.iter().map(Vec::len).sum();
        let run = |threads| {
            let mut out = vec![0.0; total];
            let pool = ThreadPool::new(threads);
            attention::attention(&pool, &b.cache.view(), &seqs, 9, 0.2, None, &mut out);
            out
        };
        assert_eq!(run(1), run(4), "{dtype}");
    }
}

/// Single-sequence decode at SmolLM2-135M geometry (3 kv heads, 9 query heads) has fewer
/// (sequence, kv head) units than 2 threads x 2, so the portable path splits units per query
/// head; the result must match the reference and be bit-identical to the unsplit
/// single-thread run.
#[test]
fn single_sequence_decode_split_per_query_head() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let c = Case {
        block_size: 16,
        n_kv: 3,
        group: 3,
        head_dim: 64,
        window: None,
        seqs: vec![(511, 1)],
    };
    for dtype in KvDtype::ALL {
        run_case(&c, dtype, &ThreadPool::new(2), &mut rng);
        let b = build(&c, dtype, 0, &mut rng);
        let seqs = seqs_of(&c, &b);
        let run = |threads| {
            let mut out = vec![0.0; b.qs[0].len()];
            let pool = ThreadPool::new(threads);
            attention::attention(&pool, &b.cache.view(), &seqs, 9, 0.125, None, &mut out);
            out
        };
        assert_eq!(run(1), run(2), "{dtype}");
    }
}
