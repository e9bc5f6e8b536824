//! Paged flash attention, every ISA variant, against the naive masked reference.

use kestrel_kernels::cpu::attention::{
    self, attention_with, reference, store_kv, AttnParams, AttnSeq, PagedKv, PagedKvMut,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Sequence spec: (prior context = q_start_pos, n_q).
type SeqSpec = (usize, usize);

struct Case {
    block_size: usize,
    n_kv: usize,
    group: usize,
    head_dim: usize,
    window: Option<usize>,
    seqs: Vec<SeqSpec>,
}

struct Built {
    k: Vec<f32>,
    v: Vec<f32>,
    tables: Vec<Vec<u32>>,
    qs: Vec<Vec<f32>>,
}

/// A cache with blocks handed out in random order, every token stored through `store_kv`.
fn build(c: &Case, rng: &mut ChaCha8Rng) -> Built {
    let row = c.n_kv * c.head_dim;
    let needs: Vec<usize> = c
        .seqs
        .iter()
        .map(|&(p, n)| (p + n).div_ceil(c.block_size))
        .collect();
    let num_blocks = needs.iter().sum::<usize>() + 3;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let (mut k, mut v) = (
        vec![f32::NAN; num_blocks * c.block_size * row],
        vec![f32::NAN; num_blocks * c.block_size * row],
    );
    let mut tables = Vec::new();
    let mut ids = ids.into_iter();
    for (&(p, n), &need) in c.seqs.iter().zip(&needs) {
        let table: Vec<u32> = ids.by_ref().take(need).collect();
        let mut kv = PagedKvMut {
            k: &mut k,
            v: &mut v,
            block_size: c.block_size,
            n_kv_heads: c.n_kv,
            head_dim: c.head_dim,
        };
        for pos in 0..p + n {
            let kr: Vec<f32> = (0..row).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let vr: Vec<f32> = (0..row).map(|_| rng.gen_range(-1.0..1.0)).collect();
            store_kv(&mut kv, &table, pos, &kr, &vr);
        }
        tables.push(table);
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
    Built { k, v, tables, qs }
}

fn run_case(c: &Case, pool: &ThreadPool, rng: &mut ChaCha8Rng) {
    let b = build(c, rng);
    let kv = PagedKv {
        k: &b.k,
        v: &b.v,
        block_size: c.block_size,
        n_kv_heads: c.n_kv,
        head_dim: c.head_dim,
    };
    let seqs: Vec<AttnSeq<'_>> = c
        .seqs
        .iter()
        .enumerate()
        .map(|(i, &(p, n))| AttnSeq {
            q: &b.qs[i],
            n_q: n,
            q_start_pos: p,
            block_table: &b.tables[i],
        })
        .collect();
    let n_heads = c.n_kv * c.group;
    let params = AttnParams {
        n_heads,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
        window: c.window,
    };
    let total: usize = b.qs.iter().map(Vec::len).sum();
    let mut want = vec![0.0; total];
    reference(&kv, &seqs, params, &mut want);
    for isa in Isa::available() {
        let mut got = vec![f32::NAN; total];
        attention_with(isa, pool, &kv, &seqs, params, &mut got);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
                "{isa:?} bs={} n_kv={} group={} window={:?} seqs={:?}: out[{i}] = {g}, reference {w}",
                c.block_size, c.n_kv, c.group, c.window, c.seqs
            );
        }
    }
}

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
                    run_case(&c, &pool, &mut rng);
                }
            }
        }
    }
}

#[test]
fn realistic_head_dims() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let pool = ThreadPool::new(2);
    for (n_kv, group, head_dim) in [(3, 3, 64), (1, 4, 128), (2, 1, 80)] {
        let seqs = vec![(300, 1), (130, 20), (0, 17)];
        let c = Case {
            block_size: 16,
            n_kv,
            group,
            head_dim,
            window: None,
            seqs,
        };
        run_case(&c, &pool, &mut rng);
    }
}

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
    let b = build(&c, &mut rng);
    let kv = PagedKv {
        k: &b.k,
        v: &b.v,
        block_size: 8,
        n_kv_heads: 3,
        head_dim: 32,
    };
    let seqs: Vec<AttnSeq<'_>> = c
        .seqs
        .iter()
        .enumerate()
        .map(|(i, &(p, n))| AttnSeq {
            q: &b.qs[i],
            n_q: n,
            q_start_pos: p,
            block_table: &b.tables[i],
        })
        .collect();
    let total: usize = b.qs.iter().map(Vec::len).sum();
    let run = |threads| {
        let mut out = vec![0.0; total];
        attention::attention(
            &ThreadPool::new(threads),
            &kv,
            &seqs,
            9,
            0.2,
            None,
            &mut out,
        );
        out
    };
    assert_eq!(run(1), run(4));
}

#[test]
fn store_kv_writes_the_documented_slot() {
    let (bs, n_kv, hd) = (4, 2, 3);
    let row = n_kv * hd;
    let (mut k, mut v) = (vec![0.0f32; 3 * bs * row], vec![0.0f32; 3 * bs * row]);
    let mut kv = PagedKvMut {
        k: &mut k,
        v: &mut v,
        block_size: bs,
        n_kv_heads: n_kv,
        head_dim: hd,
    };
    let table = [2u32, 0];
    let kr: Vec<f32> = (1..=row).map(|i| i as f32).collect();
    let vr: Vec<f32> = kr.iter().map(|x| -x).collect();
    store_kv(&mut kv, &table, 5, &kr, &vr); // logical block 1 -> physical 0, slot 1
    assert_eq!(&kv.k[row..2 * row], &kr[..]);
    assert_eq!(&kv.v[row..2 * row], &vr[..]);
    assert_eq!(kv.k.iter().filter(|x| **x != 0.0).count(), row);
    store_kv(&mut kv, &table, 2, &kr, &vr); // logical block 0 -> physical 2, slot 2
    let off = (2 * bs + 2) * row;
    assert_eq!(&kv.k[off..off + row], &kr[..]);
    assert_eq!(&kv.as_ref().v[off..off + row], &vr[..]);
}

#[test]
#[should_panic(expected = "block table too short")]
fn rejects_short_block_table() {
    let k = vec![0.0f32; 4 * 2 * 8];
    let kv = PagedKv {
        k: &k,
        v: &k,
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

/// Single-sequence decode at SmolLM2-135M geometry (3 kv heads, 9 query heads) has fewer
/// (sequence, kv head) units than 2 threads x 2, so units are split per query head; the
/// result must match the reference and be bit-identical to the unsplit single-thread run.
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
    run_case(&c, &ThreadPool::new(2), &mut rng);
    let b = build(&c, &mut rng);
    let kv = PagedKv {
        k: &b.k,
        v: &b.v,
        block_size: 16,
        n_kv_heads: 3,
        head_dim: 64,
    };
    let seqs = [AttnSeq {
        q: &b.qs[0],
        n_q: 1,
        q_start_pos: 511,
        block_table: &b.tables[0],
    }];
    let run = |threads| {
        let mut out = vec![0.0; b.qs[0].len()];
        attention::attention(
            &ThreadPool::new(threads),
            &kv,
            &seqs,
            9,
            0.125,
            None,
            &mut out,
        );
        out
    };
    assert_eq!(run(1), run(2));
}
