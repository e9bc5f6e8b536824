//! Block tables and cache sizes: entries before a window are never read (released blocks
//! there are harmless), and a short table, a released block inside the window or a cache
//! that is not a whole number of blocks is refused.

use kestrel_kernels::cpu::attention::{self, attention_with, reference, AttnSeq, KvDtype, PagedKv};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{build, params_of, seqs_of, Case, HOLE};

#[test]
#[should_panic(expected = "block table too short")]
fn rejects_short_block_table() {
    let k = vec![0u8; 4 * 2 * 8 * 2];
    let kv = PagedKv {
        k: &k,
        v: &k,
        dtype: KvDtype::F16,
        block_size: 4,
        n_kv_heads: 2,
        head_dim: 8,
    };
    let q = vec![0.0f32; 2 * 8];
    let seqs = [AttnSeq {
        q: &q,
        n_q: 1,
        q_start_pos: 4,
        block_table: &[0],
    }];
    let mut out = vec![0.0; q.len()];
    attention::attention(&ThreadPool::new(1), &kv, &seqs, 2, 1.0, None, &mut out);
}

#[test]
#[should_panic(expected = "attention: cache size")]
fn rejects_cache_not_a_whole_number_of_q8_blocks() {
    let k = vec![0u8; 4 * 2 * 8 * 4]; // f32-sized, not a multiple of q8 blocks (4·2·12 bytes)
    let kv = PagedKv {
        k: &k,
        v: &k,
        dtype: KvDtype::Q8,
        block_size: 4,
        n_kv_heads: 2,
        head_dim: 8,
    };
    let q = vec![0.0f32; 2 * 8];
    let seqs = [AttnSeq {
        q: &q,
        n_q: 1,
        q_start_pos: 0,
        block_table: &[0],
    }];
    let mut out = vec![0.0; q.len()];
    attention::attention(&ThreadPool::new(1), &kv, &seqs, 2, 1.0, None, &mut out);
}

/// Entries wholly before the first query's window are never read: replacing them with an
/// out-of-range id changes nothing, for every ISA, dtype and the reference.
#[test]
fn blocks_before_the_window_are_never_read() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, window) in [(4, 7), (4, 8), (16, 20), (1, 3), (5, 9)] {
            let c = Case {
                block_size,
                n_kv: 2,
                group: 2,
                head_dim: 16,
                window: Some(window),
                seqs: vec![(37, 1), (64, 1), (23, 19), (3, 5), (80, 16)],
            };
            let b = build(&c, dtype, 0, &mut rng);
            let seqs = seqs_of(&c, &b);
            let holed: Vec<Vec<u32>> = c
                .seqs
                .iter()
                .zip(&b.tables)
                .map(|(&(p, _), t)| {
                    let dead = (p + 1).saturating_sub(window) / block_size;
                    let mut t = t.clone();
                    t[..dead].fill(HOLE);
                    t
                })
                .collect();
            assert!(holed.iter().any(|t| t.contains(&HOLE)));
            let holed_seqs: Vec<AttnSeq<'_>> = seqs
                .iter()
                .zip(&holed)
                .map(|(s, t)| AttnSeq {
                    block_table: t,
                    ..*s
                })
                .collect();
            let params = params_of(&c);
            let total: usize = b.qs.iter().map(Vec::len).sum();
            let (mut want, mut got_ref) = (vec![0.0; total], vec![0.0; total]);
            reference(&b.cache.view(), &seqs, params, &mut want);
            reference(&b.cache.view(), &holed_seqs, params, &mut got_ref);
            assert_eq!(
                want, got_ref,
                "{dtype} bs={block_size} w={window}: reference"
            );
            for isa in Isa::available() {
                let (mut full, mut got) = (vec![0.0; total], vec![0.0; total]);
                attention_with(isa, &pool, &b.cache.view(), &seqs, params, &mut full);
                attention_with(isa, &pool, &b.cache.view(), &holed_seqs, params, &mut got);
                assert_eq!(full, got, "{dtype} {isa:?} bs={block_size} w={window}");
            }
        }
    }
}

#[test]
#[should_panic(expected = "block table entry out of range")]
fn rejects_a_released_block_inside_the_window() {
    let k = vec![0u8; 4 * 4 * 2 * 8 * 2];
    let kv = PagedKv {
        k: &k,
        v: &k,
        dtype: KvDtype::F16,
        block_size: 4,
        n_kv_heads: 2,
        head_dim: 8,
    };
    let q = vec![0.0f32; 2 * 8];
    // The query at 9 with a window of 7 sees 3..=9: block 0 (positions 0..4) is still read.
    let seqs = [AttnSeq {
        q: &q,
        n_q: 1,
        q_start_pos: 9,
        block_table: &[HOLE, 1, 2],
    }];
    let mut out = vec![0.0; q.len()];
    attention::attention(&ThreadPool::new(1), &kv, &seqs, 2, 1.0, Some(7), &mut out);
}
