//! Attention sinks (gpt-oss): a per-head logit in the softmax denominator only, on every ISA
//! variant and KV dtype, on the decode, tiled and key-chunked paths.

use kestrel_kernels::cpu::attention::{
    attention_with, reference, AttnParams, AttnSeq, KvDtype, KEY_CHUNK,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{build, params_of, seqs_of, Case};

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// Every variant and dtype against the reference with sinks of both signs and magnitudes
/// (decode, prefill tiles, a window, a decode over several key chunks, GQA and MQA); the
/// sinks move the output.
#[test]
fn sinks_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let pool = ThreadPool::new(2);
    let k = KEY_CHUNK;
    for dtype in KvDtype::ALL {
        for (block_size, n_kv, group, window, seqs) in [
            (4, 2, 1, None, vec![(0, 1), (37, 1), (0, 40), (23, 19)]),
            (16, 2, 3, Some(7), vec![(0, 1), (37, 1), (0, 40), (23, 19)]),
            (16, 1, 4, None, vec![(2 * k + 300, 1), (k - 8, 20)]),
        ] {
            let c = Case {
                block_size,
                n_kv,
                group,
                head_dim: 32,
                window,
                seqs,
            };
            let b = build(&c, dtype, 0, &mut rng);
            let seqs: Vec<AttnSeq<'_>> = seqs_of(&c, &b);
            // Head 0's sink is far below the scores; the others are near or above them.
            let sinks: Vec<f32> = (0..n_kv * group)
                .map(|h| match h {
                    0 => -3.0,
                    _ => rng.gen_range(1.0f32..8.0),
                })
                .collect();
            let params = AttnParams {
                sinks: Some(&sinks),
                ..params_of(&c)
            };
            let total: usize = b.qs.iter().map(Vec::len).sum();
            let (mut want, mut plain) = (vec![0.0; total], vec![0.0; total]);
            reference(&b.cache.view(), &seqs, params, &mut want);
            reference(&b.cache.view(), &seqs, params_of(&c), &mut plain);
            let moved = max_diff(&want, &plain);
            let size = plain.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            assert!(
                moved > 0.1 * size,
                "sinks changed little ({moved} of {size})"
            );
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; total];
                attention_with(isa, &pool, &b.cache.view(), &seqs, params, &mut got);
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 5e-5 + 1e-4 * w.abs(),
                        "{dtype} {isa:?} bs={block_size} group={group}: out[{i}] = {g}, reference {w}"
                    );
                }
            }
        }
    }
}

/// One key: the output is the value row times `e^s / (e^s + e^sink)`, here with the score
/// and the sink equal, so exactly half of it.
#[test]
fn a_sink_equal_to_the_only_score_halves_the_value() {
    let c = Case {
        block_size: 4,
        n_kv: 1,
        group: 1,
        head_dim: 8,
        window: None,
        seqs: vec![(0, 1)],
    };
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let b = build(&c, KvDtype::F32, 0, &mut rng);
    let seqs = seqs_of(&c, &b);
    let p = params_of(&c);
    let (k, v) = &b.orig[0][0];
    let score: f32 = b.qs[0].iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * p.scale;
    let sinks = [score];
    let params = AttnParams {
        sinks: Some(&sinks),
        ..p
    };
    let pool = ThreadPool::new(1);
    let mut got = vec![0.0; 8];
    attention_with(Isa::Scalar, &pool, &b.cache.view(), &seqs, params, &mut got);
    for (g, v) in got.iter().zip(v) {
        assert!((g - v / 2.0).abs() <= 1e-5, "{g} vs half of {v}");
    }
}
