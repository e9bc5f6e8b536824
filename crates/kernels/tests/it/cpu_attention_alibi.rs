//! ALiBi position biases: every ISA variant and KV dtype against the reference, the slope
//! rule, and the reference itself checked by hand.

use kestrel_kernels::cpu::attention::{reference, store_kv, Alibi, AttnParams, AttnSeq, KvDtype};
use kestrel_kernels::cpu::ThreadPool;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{params_of, run_case_with, Cache, Case, SeqSpec};

/// ALiBi biases on every variant and dtype: 2 kv heads × groups 1, 3, 4 (2, 6 and 8 query
/// heads: 6 is not a power of two, so both branches of the slope rule run), with and without
/// a window, decode, prefill and prefill chunks with prior context (the bias needs absolute
/// positions), block sizes around the tile sizes; head_dim 24 leaves column tails.
#[test]
fn alibi_matches_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let pool = ThreadPool::new(3);
    let seq_sets: [Vec<SeqSpec>; 3] = [
        vec![(37, 1), (0, 1), (100, 1), (5, 1)],
        vec![(0, 40)],
        vec![(23, 19), (0, 5), (64, 1), (3, 33)],
    ];
    for dtype in KvDtype::ALL {
        for block_size in [1, 4, 16] {
            for group in [1, 3, 4] {
                for window in [None, Some(7), Some(50)] {
                    for seqs in &seq_sets {
                        let c = Case {
                            block_size,
                            n_kv: 2,
                            group,
                            head_dim: 24,
                            window,
                            seqs: seqs.clone(),
                        };
                        let params = AttnParams {
                            alibi: Some(Alibi::STANDARD),
                            ..params_of(&c)
                        };
                        run_case_with(&c, dtype, &pool, &mut rng, params);
                    }
                }
            }
        }
    }
}

/// The slopes of transformers' `build_alibi_tensor` and llama.cpp (max_bias 8): powers of
/// 2^(−8/n) for a power-of-two n; otherwise those of the largest power of two p below n, then
/// the odd powers of 2^(−4/p).
#[test]
fn alibi_slopes_follow_the_rule() {
    let a = Alibi::STANDARD;
    let pow2 = |e: f32| 2f32.powf(e);
    assert_eq!(a.slopes(1), [pow2(-8.0)]);
    assert_eq!(
        a.slopes(8),
        (1..=8).map(|i| pow2(-(i as f32))).collect::<Vec<_>>()
    );
    assert_eq!(
        a.slopes(6),
        [
            1.0 / 4.0,
            1.0 / 16.0,
            1.0 / 64.0,
            1.0 / 256.0,
            1.0 / 2.0,
            1.0 / 8.0
        ]
    );
    let twelve = a.slopes(12);
    let want: Vec<f32> = (1..=8)
        .map(|i| pow2(-(i as f32)))
        .chain([0.5, 1.5, 2.5, 3.5].map(|e| pow2(-e)))
        .collect();
    for (g, w) in twelve.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-7 * w,
            "12 heads: {twelve:?} vs {want:?}"
        );
    }
    // BLOOM-176B has 112 heads: p = 64, m0 = 2^(-1/8), m1 = 2^(-1/16).
    let s = a.slopes(112);
    assert!((s[0] - pow2(-0.125)).abs() < 1e-7 && (s[63] - pow2(-8.0)).abs() < 1e-9);
    assert!((s[64] - pow2(-1.0 / 16.0)).abs() < 1e-7);
    assert!((s[111] - pow2(-95.0 / 16.0)).abs() < 1e-7);
}

/// The spec by hand: one head, q = 0 (every score 0), so the weights are
/// `e^{slope·(j − pos)}` normalized; values `v_j = j` give their mean position.
#[test]
fn alibi_reference_by_hand() {
    let c = Case {
        block_size: 4,
        n_kv: 1,
        group: 1,
        head_dim: 1,
        window: None,
        seqs: vec![(0, 6)],
    };
    let mut cache = Cache::new(&c, KvDtype::F32, 2, 0);
    let table = [1u32, 0];
    for j in 0..6 {
        store_kv(&mut cache.view_mut(), &table, j, &[1.0], &[j as f32]);
    }
    let q = vec![0.0f32; 6];
    let seqs = [AttnSeq {
        q: &q,
        n_q: 6,
        q_start_pos: 0,
        block_table: &table,
    }];
    // One head: p = 1, slope = 2^(−max_bias) = 1/2.
    let params = AttnParams {
        alibi: Some(Alibi { max_bias: 1.0 }),
        ..params_of(&c)
    };
    let mut out = vec![0.0; 6];
    reference(&cache.view(), &seqs, params, &mut out);
    let slope = 0.5f64;
    for (pos, &o) in out.iter().enumerate() {
        let w: Vec<f64> = (0..=pos)
            .map(|j| (slope * (j as f64 - pos as f64)).exp())
            .collect();
        let want =
            w.iter().enumerate().map(|(j, w)| w * j as f64).sum::<f64>() / w.iter().sum::<f64>();
        assert!((o as f64 - want).abs() < 1e-6, "pos {pos}: {o} vs {want}");
        if pos > 0 {
            assert!(
                o > pos as f32 / 2.0 + 0.1,
                "pos {pos}: the bias favours recent keys"
            );
        }
    }
}
