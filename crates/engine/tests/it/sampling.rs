//! Sampler tests: greedy, seeding, empirical distributions, each filter, penalties, validation
//! and logprobs.

use kestrel_engine::sampling::{
    argmax, logprobs, SampleError, Sampler, SamplerScratch, SamplingParamError, SamplingParams,
    TokenHistory, MAX_LOGPROBS,
};

fn params() -> SamplingParams {
    SamplingParams {
        seed: Some(7),
        ..SamplingParams::default()
    }
}

fn sampler(p: SamplingParams) -> Sampler {
    Sampler::new(p).expect("valid params")
}

fn no_history() -> TokenHistory<'static> {
    TokenHistory::new(&[], 0)
}

/// Empirical frequencies of `n` draws from `logits`.
fn frequencies(p: SamplingParams, logits: &[f32], n: usize) -> Vec<f64> {
    let mut s = sampler(p);
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n {
        let mut row = logits.to_vec();
        let t = s
            .sample(&mut row, no_history(), &mut SamplerScratch::default())
            .expect("sample");
        counts[t as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / n as f64).collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "token {i}: got {g:.4}, want {w:.4} (all: {got:?})"
        );
    }
}

fn ln(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

#[test]
fn greedy_picks_argmax_and_lowest_id_on_ties() {
    let mut s = sampler(SamplingParams {
        temperature: 0.0,
        ..params()
    });
    let mut logits = vec![0.5, 3.0, -1.0, 3.0, f32::NAN];
    assert_eq!(
        s.sample(&mut logits, no_history(), &mut SamplerScratch::default()),
        Ok(1)
    );
    assert_eq!(argmax(&[f32::NAN, -2.0, -1.0]), Some(2));
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NAN]), None);
}

#[test]
fn greedy_is_deterministic_regardless_of_seed() {
    let logits: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32 * 0.1).collect();
    let expected = argmax(&logits).expect("finite");
    for seed in 0..5 {
        let mut s = sampler(SamplingParams {
            temperature: 0.0,
            seed: Some(seed),
            ..params()
        });
        let mut row = logits.clone();
        assert_eq!(
            s.sample(&mut row, no_history(), &mut SamplerScratch::default()),
            Ok(expected)
        );
    }
}

#[test]
fn unsampleable_rows_are_errors() {
    let mut s = sampler(params());
    assert_eq!(
        s.sample(&mut [], no_history(), &mut SamplerScratch::default()),
        Err(SampleError::EmptyLogits)
    );
    let mut masked = vec![f32::NEG_INFINITY, f32::NAN];
    assert_eq!(
        s.sample(&mut masked, no_history(), &mut SamplerScratch::default()),
        Err(SampleError::NoFiniteLogits)
    );
    let mut greedy = sampler(SamplingParams {
        temperature: 0.0,
        ..params()
    });
    let mut masked = vec![f32::NEG_INFINITY; 3];
    assert_eq!(
        greedy.sample(&mut masked, no_history(), &mut SamplerScratch::default()),
        Err(SampleError::NoFiniteLogits)
    );
}

#[test]
fn same_seed_same_tokens_different_seed_different_tokens() {
    let logits: Vec<f32> = (0..500).map(|i| (i % 17) as f32 * 0.05).collect();
    let run = |seed: u64| -> Vec<u32> {
        let mut s = sampler(SamplingParams {
            seed: Some(seed),
            ..params()
        });
        (0..64)
            .map(|_| {
                s.sample(
                    &mut logits.clone(),
                    no_history(),
                    &mut SamplerScratch::default(),
                )
                .expect("sample")
            })
            .collect()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
    let s = sampler(SamplingParams {
        seed: None,
        ..params()
    });
    let t = sampler(SamplingParams {
        seed: None,
        ..params()
    });
    assert_ne!(
        s.seed(),
        t.seed(),
        "unseeded samplers should draw distinct seeds"
    );
}

#[test]
fn plain_sampling_matches_softmax() {
    let probs = [0.1, 0.2, 0.3, 0.4];
    let got = frequencies(params(), &ln(&probs), 40_000);
    assert_close(&got, &probs, 0.012);
}

#[test]
fn temperature_flattens_distribution() {
    let probs = [0.1f64, 0.2, 0.3, 0.4];
    // softmax(ln(p) / 2) ∝ sqrt(p).
    let roots: Vec<f64> = probs.iter().map(|p| p.sqrt()).collect();
    let z: f64 = roots.iter().sum();
    let want: Vec<f64> = roots.iter().map(|r| r / z).collect();
    let got = frequencies(
        SamplingParams {
            temperature: 2.0,
            ..params()
        },
        &ln(&probs),
        40_000,
    );
    assert_close(&got, &want, 0.012);
}

#[test]
fn top_k_keeps_only_k_best_renormalized() {
    let probs = [0.1, 0.4, 0.2, 0.3];
    let got = frequencies(
        SamplingParams {
            top_k: Some(2),
            ..params()
        },
        &ln(&probs),
        30_000,
    );
    assert_close(&got, &[0.0, 4.0 / 7.0, 0.0, 3.0 / 7.0], 0.012);
    assert_eq!(got[0], 0.0);
    assert_eq!(got[2], 0.0);
}

#[test]
fn top_k_larger_than_vocab_is_plain_sampling() {
    let probs = [0.25, 0.75];
    let got = frequencies(
        SamplingParams {
            top_k: Some(50),
            ..params()
        },
        &ln(&probs),
        20_000,
    );
    assert_close(&got, &probs, 0.015);
}

#[test]
fn top_p_keeps_smallest_nucleus() {
    let probs = [0.15, 0.5, 0.05, 0.3];
    // Sorted: 0.5, 0.3 (mass 0.8 >= 0.75) → keep ids 1 and 3.
    let got = frequencies(
        SamplingParams {
            top_p: 0.75,
            ..params()
        },
        &ln(&probs),
        30_000,
    );
    assert_close(&got, &[0.0, 0.625, 0.0, 0.375], 0.012);
    assert_eq!(got[0] + got[2], 0.0);
}

#[test]
fn top_p_always_keeps_the_best_token() {
    let probs = [0.2, 0.7, 0.1];
    let got = frequencies(
        SamplingParams {
            top_p: 0.01,
            ..params()
        },
        &ln(&probs),
        2_000,
    );
    assert_eq!(got, vec![0.0, 1.0, 0.0]);
}

#[test]
fn top_p_over_large_flat_vocab_keeps_lowest_ids_on_ties() {
    // 400 equally likely tokens and 600 negligible ones: the nucleus of 0.5 is exactly the 200
    // lowest ids (ties are broken by id), found without sorting the vocabulary.
    let logits: Vec<f32> = (0..1000)
        .map(|i| if i < 400 { 0.0 } else { -40.0 })
        .collect();
    let mut s = sampler(SamplingParams {
        top_p: 0.5,
        ..params()
    });
    let mut max_seen = 0;
    for _ in 0..4000 {
        let t = s
            .sample(
                &mut logits.clone(),
                no_history(),
                &mut SamplerScratch::default(),
            )
            .expect("sample");
        assert!(t < 200, "token {t} is outside the nucleus");
        max_seen = max_seen.max(t);
    }
    assert!(max_seen >= 195, "nucleus too small: max id {max_seen}");
}

#[test]
fn top_k_then_top_p_then_min_p_compose() {
    // top_k 3 keeps {0.4, 0.3, 0.2}; renormalized {0.444, 0.333, 0.222}; top_p 0.7 keeps two.
    let probs = [0.05, 0.4, 0.3, 0.2, 0.05];
    let got = frequencies(
        SamplingParams {
            top_k: Some(3),
            top_p: 0.7,
            ..params()
        },
        &ln(&probs),
        20_000,
    );
    assert_close(&got, &[0.0, 4.0 / 7.0, 3.0 / 7.0, 0.0, 0.0], 0.015);
}

#[test]
fn min_p_drops_tokens_below_fraction_of_top() {
    let probs = [0.5, 0.3, 0.15, 0.05];
    // threshold 0.2 * 0.5 = 0.1 → token 3 (0.05) goes.
    let got = frequencies(
        SamplingParams {
            min_p: 0.2,
            ..params()
        },
        &ln(&probs),
        30_000,
    );
    assert_eq!(got[3], 0.0);
    assert_close(&got, &[0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0], 0.012);
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative() {
    let mut s = sampler(SamplingParams {
        temperature: 0.0,
        repetition_penalty: 2.0,
        ..params()
    });
    let mut logits = vec![2.0, -1.0, 1.5, 0.5];
    // Token 0 is in the prompt, token 1 was generated (twice: penalized once).
    let tokens = [0, 1, 1, 99];
    let t = s
        .sample(
            &mut logits,
            TokenHistory::new(&tokens, 1),
            &mut SamplerScratch::default(),
        )
        .expect("sample");
    assert_eq!(logits, vec![1.0, -2.0, 1.5, 0.5]);
    assert_eq!(t, 2);
}

#[test]
fn frequency_and_presence_penalties_use_generated_tokens_only() {
    let mut s = sampler(SamplingParams {
        temperature: 0.0,
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..params()
    });
    let mut logits = vec![0.0; 4];
    let tokens = [0, 1, 1, 2];
    let t = s
        .sample(
            &mut logits,
            TokenHistory::new(&tokens, 1),
            &mut SamplerScratch::default(),
        )
        .expect("sample");
    assert_eq!(logits, vec![0.0, -1.25, -0.75, 0.0]);
    assert_eq!(t, 0);
    // Scratch state is reset between calls: the same call gives the same adjustment.
    let mut again = vec![0.0; 4];
    s.sample(
        &mut again,
        TokenHistory::new(&tokens, 1),
        &mut SamplerScratch::default(),
    )
    .expect("sample");
    assert_eq!(again, logits);
}

#[test]
fn negative_presence_penalty_encourages_repeats() {
    let mut s = sampler(SamplingParams {
        temperature: 0.0,
        presence_penalty: -1.0,
        ..params()
    });
    let mut logits = vec![0.5, 0.0];
    let t = s
        .sample(
            &mut logits,
            TokenHistory::new(&[1], 0),
            &mut SamplerScratch::default(),
        )
        .expect("sample");
    assert_eq!(t, 1);
}

#[test]
fn validation_rejects_out_of_range_values() {
    let cases: Vec<(SamplingParams, SamplingParamError)> = vec![
        (
            SamplingParams {
                temperature: -0.1,
                ..params()
            },
            SamplingParamError::Temperature(-0.1),
        ),
        (
            SamplingParams {
                top_k: Some(0),
                ..params()
            },
            SamplingParamError::TopK,
        ),
        (
            SamplingParams {
                top_p: 0.0,
                ..params()
            },
            SamplingParamError::TopP(0.0),
        ),
        (
            SamplingParams {
                top_p: 1.5,
                ..params()
            },
            SamplingParamError::TopP(1.5),
        ),
        (
            SamplingParams {
                min_p: 1.1,
                ..params()
            },
            SamplingParamError::MinP(1.1),
        ),
        (
            SamplingParams {
                min_p: -0.1,
                ..params()
            },
            SamplingParamError::MinP(-0.1),
        ),
        (
            SamplingParams {
                repetition_penalty: 0.0,
                ..params()
            },
            SamplingParamError::RepetitionPenalty(0.0),
        ),
        (
            SamplingParams {
                frequency_penalty: 2.5,
                ..params()
            },
            SamplingParamError::FrequencyPenalty(2.5),
        ),
        (
            SamplingParams {
                presence_penalty: -3.0,
                ..params()
            },
            SamplingParamError::PresencePenalty(-3.0),
        ),
        (
            SamplingParams {
                max_tokens: 0,
                ..params()
            },
            SamplingParamError::MaxTokens,
        ),
        (
            SamplingParams {
                logprobs: Some(MAX_LOGPROBS + 1),
                ..params()
            },
            SamplingParamError::Logprobs(MAX_LOGPROBS + 1),
        ),
        (
            SamplingParams {
                stop: vec![String::new()],
                ..params()
            },
            SamplingParamError::EmptyStop,
        ),
    ];
    for (p, want) in cases {
        assert_eq!(p.validate(), Err(want.clone()));
        assert_eq!(Sampler::new(p).err(), Some(want));
    }
    let nan = SamplingParams {
        temperature: f32::NAN,
        ..params()
    };
    assert!(matches!(
        nan.validate(),
        Err(SamplingParamError::Temperature(_))
    ));
    assert_eq!(SamplingParamError::TopP(2.0).param(), "top_p");
    assert_eq!(params().validate(), Ok(()));
}

#[test]
fn stop_tokens_respect_ignore_eos() {
    let p = SamplingParams {
        stop_token_ids: vec![7],
        ..params()
    };
    assert!(p.is_stop_token(7, &[2]));
    assert!(p.is_stop_token(2, &[2]));
    assert!(!p.is_stop_token(3, &[2]));
    let ignore = SamplingParams {
        ignore_eos: true,
        ..p
    };
    assert!(!ignore.is_stop_token(2, &[2]));
    assert!(ignore.is_stop_token(7, &[2]));
}

#[test]
fn logprobs_are_log_softmax_with_sorted_top_n() {
    let logits = [1.0f32, 3.0, 2.0, 3.0, f32::NAN];
    let lp = logprobs(&logits, 2, 3).expect("logprobs");
    let z: f64 = [1.0f64, 3.0, 2.0, 3.0].iter().map(|l| l.exp()).sum();
    let expect = |l: f64| (l - z.ln()) as f32;
    assert!((lp.chosen.logprob - expect(2.0)).abs() < 1e-5);
    assert_eq!(lp.chosen.token, 2);
    let ids: Vec<u32> = lp.top.iter().map(|t| t.token).collect();
    assert_eq!(ids, vec![1, 3, 2]);
    assert!((lp.top[0].logprob - expect(3.0)).abs() < 1e-5);
    let all = logprobs(&logits, 0, 10).expect("logprobs");
    assert_eq!(all.top.len(), 5);
    assert_eq!(all.top[4].logprob, f32::NEG_INFINITY);
    let mass: f32 = all.top.iter().map(|t| t.logprob.exp()).sum();
    assert!((mass - 1.0).abs() < 1e-5);
    assert_eq!(
        logprobs(&logits, 9, 1),
        Err(SampleError::TokenOutOfRange { token: 9, vocab: 5 })
    );
}

#[test]
fn logit_bias_forces_and_bans_tokens_before_penalties() {
    use kestrel_engine::logit_bias::LogitBias;
    // Token 3 is by far the likeliest; +100 on token 1 forces it, -100 on 3 bans it.
    let logits = [0.0, 0.5, 1.0, 9.0];
    let mut greedy = sampler(SamplingParams {
        temperature: 0.0,
        logit_bias: LogitBias::new(vec![(1, 100.0)]),
        ..params()
    });
    let mut row = logits.to_vec();
    assert_eq!(
        greedy
            .sample(&mut row, no_history(), &mut SamplerScratch::default())
            .expect("sample"),
        1
    );
    assert_eq!(
        row,
        vec![0.0, 100.5, 1.0, 9.0],
        "bias added to the raw logits"
    );
    // Sampled at temperature 1 with the top token banned: it never comes up.
    let banned = SamplingParams {
        logit_bias: LogitBias::new(vec![(3, -100.0)]),
        ..params()
    };
    let f = frequencies(banned, &logits, 2000);
    assert_eq!(f[3], 0.0, "banned token drawn: {f:?}");
    // The bias comes before the repetition penalty: 0.5 + 100 = 100.5, then / 2.
    let mut s = sampler(SamplingParams {
        temperature: 0.0,
        repetition_penalty: 2.0,
        logit_bias: LogitBias::new(vec![(1, 100.0)]),
        ..params()
    });
    let mut row = logits.to_vec();
    s.sample(
        &mut row,
        TokenHistory::new(&[1], 1),
        &mut SamplerScratch::default(),
    )
    .expect("sample");
    assert_eq!(row[1], 50.25);
    assert!(matches!(
        Sampler::new(SamplingParams {
            logit_bias: LogitBias::new(vec![(1, 101.0)]),
            ..params()
        }),
        Err(SamplingParamError::LogitBias(_))
    ));
}

#[test]
fn min_tokens_bans_stop_and_eos_ids_until_reached() {
    let p = SamplingParams {
        temperature: 0.0,
        min_tokens: 2,
        stop_token_ids: vec![2],
        ..params()
    };
    let mut s = sampler(p).with_eos_ids(&[3]);
    // Tokens 3 (EOS) and 2 (stop) lead; before two generated tokens both are banned.
    let logits = [0.0, 1.0, 8.0, 9.0];
    let mut row = logits.to_vec();
    let t = s
        .sample(
            &mut row,
            TokenHistory::new(&[5, 1], 1),
            &mut SamplerScratch::default(),
        )
        .expect("sample");
    assert_eq!(t, 1);
    assert_eq!(row[2], f32::NEG_INFINITY);
    assert_eq!(row[3], f32::NEG_INFINITY);
    let mut row = logits.to_vec();
    let t = s
        .sample(
            &mut row,
            TokenHistory::new(&[5, 1, 1], 1),
            &mut SamplerScratch::default(),
        )
        .expect("sample");
    assert_eq!(t, 3, "after min_tokens the EOS wins again");
}

#[test]
fn samplers_sharing_one_scratch_draw_what_each_draws_alone() {
    // Two requests of different vocabularies and filters take turns with one scratch (as on
    // the engine thread); each must draw exactly what it draws with a scratch of its own.
    let make = |seed, vocab: usize| {
        let p = SamplingParams {
            temperature: 0.9,
            top_k: Some(vocab / 2),
            top_p: 0.8,
            repetition_penalty: 1.3,
            frequency_penalty: 0.4,
            presence_penalty: 0.2,
            seed: Some(seed),
            ..params()
        };
        let logits: Vec<f32> = (0..vocab).map(|i| ((i * 37 % 11) as f32) * 0.3).collect();
        (sampler(p), logits)
    };
    fn draw(s: &mut Sampler, logits: &[f32], history: &mut Vec<u32>, scratch: &mut SamplerScratch) {
        let mut row = logits.to_vec();
        let t = s
            .sample(&mut row, TokenHistory::new(history, 1), scratch)
            .expect("sample");
        history.push(t);
    }
    let (mut a, la) = make(1, 300);
    let (mut b, lb) = make(2, 40);
    let (mut a2, _) = make(1, 300);
    let (mut b2, _) = make(2, 40);
    let (mut ha, mut hb, mut ha2, mut hb2) = (vec![0], vec![0], vec![0], vec![0]);
    let mut shared = SamplerScratch::default();
    let (mut own_a, mut own_b) = (SamplerScratch::default(), SamplerScratch::default());
    for _ in 0..50 {
        draw(&mut a, &la, &mut ha, &mut shared);
        draw(&mut b, &lb, &mut hb, &mut shared);
        draw(&mut a2, &la, &mut ha2, &mut own_a);
        draw(&mut b2, &lb, &mut hb2, &mut own_b);
    }
    assert_eq!((ha, hb), (ha2, hb2));
}
