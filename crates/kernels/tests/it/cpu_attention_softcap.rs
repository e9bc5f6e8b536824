//! Soft-capped attention scores (Gemma 2) on every ISA variant and KV dtype.

use kestrel_kernels::cpu::attention::{attention_with, reference, AttnParams, KvDtype};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::attention_common::{build, params_of, seqs_of, Case};

/// Soft-capped scores (Gemma 2): every variant and dtype against the reference, on both the
/// per-row and the tiled paths (decode, prefill, windows), with a score scale that makes the
/// cap bite (|scores| up to ~30 against caps of 5 and 50); the capped output differs from the
/// uncapped one.
#[test]
fn softcapped_scores_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let pool = ThreadPool::new(2);
    for dtype in KvDtype::ALL {
        for (block_size, group, window, cap) in [
            (4, 1, None, 5.0),
            (16, 3, Some(7), 50.0),
            (16, 4, None, 5.0),
        ] {
            let c = Case {
                block_size,
                n_kv: 2,
                group,
                head_dim: 32,
                window,
                seqs: vec![(0, 1), (37, 1), (0, 40), (23, 19)],
            };
            let b = build(&c, dtype, 0, &mut rng);
            let seqs = seqs_of(&c, &b);
            let params = AttnParams {
                scale: 1.5,
                softcap: Some(cap),
                ..params_of(&c)
            };
            let total: usize = b.qs.iter().map(Vec::len).sum();
            let (mut want, mut uncapped) = (vec![0.0; total], vec![0.0; total]);
            reference(&b.cache.view(), &seqs, params, &mut want);
            let plain = AttnParams {
                softcap: None,
                ..params
            };
            reference(&b.cache.view(), &seqs, plain, &mut uncapped);
            let moved = want
                .iter()
                .zip(&uncapped)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(moved > 1e-2, "cap {cap}: capping changed nothing ({moved})");
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; total];
                attention_with(isa, &pool, &b.cache.view(), &seqs, params, &mut got);
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 5e-5 + 1e-4 * w.abs(),
                        "{dtype} {isa:?} cap {cap} bs={block_size} group={group}: out[{i}] = {g}, reference {w}"
                    );
                }
            }
        }
    }
}
