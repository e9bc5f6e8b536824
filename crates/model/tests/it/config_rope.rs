//! rope_inv_freq: base frequencies; linear, llama3, per-factor, YaRN, dynamic NTK and LongRoPE
//! scaling; partial rotary. The YaRN / dynamic / LongRoPE / partial cases are checked against
//! transformers' own values (tests/fixtures/goldens/rope-params.json, scripts/goldens/rope_params.py).

use kestrel_model::config::{ModelConfig, RopeScaling};
use kestrel_model::families;

fn config(head_dim: usize, theta: f32, scaling: Option<RopeScaling>) -> ModelConfig {
    ModelConfig {
        architecture: families::by_name("llama").unwrap(),
        vocab_size: 10,
        hidden_size: head_dim * 2,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim,
        rotary_dim: head_dim,
        intermediate_size: 8,
        rms_norm_eps: 1e-5,
        rope_theta: theta,
        rope_scaling: scaling,
        max_position_embeddings: 128,
        rope_context_length: 128,
        tie_word_embeddings: false,
        sliding_window: None,
        window_layers: None,
        attention_bias: false,
        qk_norm: false,
        gemma: None,
        mla: None,
        bos_token_id: None,
        eos_token_ids: vec![],
        dtype: None,
        moe: None,
    }
}

fn base(head_dim: usize, theta: f64) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| theta.powf(-((2 * i) as f64) / head_dim as f64))
        .collect()
}

#[test]
fn unscaled_frequencies() {
    let inv = config(8, 10000.0, None).rope_inv_freq();
    let expected = [1.0, 0.1, 0.01, 0.001];
    for (a, e) in inv.iter().zip(expected) {
        assert!((a - e).abs() <= e * 1e-6, "{a} vs {e}");
    }
}

#[test]
fn linear_scaling_divides_every_frequency() {
    let plain = config(64, 10000.0, None).rope_inv_freq();
    let scaled = config(64, 10000.0, Some(RopeScaling::Linear { factor: 4.0 })).rope_inv_freq();
    for (p, s) in plain.iter().zip(&scaled) {
        assert!((p / 4.0 - s).abs() <= s * 1e-6);
    }
}

#[test]
fn llama3_scaling_matches_the_three_regions() {
    let scaling = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position: 8192,
    };
    let c = config(128, 500000.0, Some(scaling));
    c.validate().unwrap();
    let inv = c.rope_inv_freq();
    let b = base(128, 500000.0);
    let (low_wl, high_wl) = (8192.0 / 1.0, 8192.0 / 4.0);
    let (mut kept, mut divided, mut smoothed) = (0, 0, 0);
    for (i, (&got, &f)) in inv.iter().zip(&b).enumerate() {
        let wl = 2.0 * std::f64::consts::PI / f;
        let expected = if wl < high_wl {
            kept += 1;
            f
        } else if wl > low_wl {
            divided += 1;
            f / 8.0
        } else {
            smoothed += 1;
            let s = (8192.0 / wl - 1.0) / (4.0 - 1.0);
            let v = (1.0 - s) * f / 8.0 + s * f;
            assert!(v < f && v > f / 8.0, "ramp value between the ends at {i}");
            v
        };
        assert!(
            (f64::from(got) - expected).abs() <= expected * 1e-6,
            "index {i}: {got} vs {expected}"
        );
    }
    assert_eq!(inv[0], 1.0);
    assert!(
        kept > 0 && divided > 0 && smoothed > 0,
        "{kept} {divided} {smoothed}"
    );
    assert_eq!(kept + divided + smoothed, 64);
}

#[test]
fn frequency_factors_divide_pairwise() {
    let factors = vec![1.0, 2.0, 4.0, 8.0];
    let inv = config(8, 10000.0, Some(RopeScaling::FreqFactors { factors })).rope_inv_freq();
    let b = base(8, 10000.0);
    for (i, k) in [1.0, 2.0, 4.0, 8.0].iter().enumerate() {
        assert!((f64::from(inv[i]) - b[i] / k).abs() < 1e-9);
    }
    let bad = config(
        8,
        10000.0,
        Some(RopeScaling::FreqFactors {
            factors: vec![1.0; 3],
        }),
    );
    assert!(bad.validate().is_err());
}

/// Reference values from a float32 NumPy transcription of transformers'
/// `_compute_llama3_parameters` (Llama 3.1 8B parameters).
#[test]
fn llama3_scaling_matches_float32_reference_values() {
    let scaling = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position: 8192,
    };
    let inv = config(128, 500000.0, Some(scaling)).rope_inv_freq();
    let reference = [
        (0, 1.0),
        (10, 0.12868738174438477),
        (20, 0.016560440883040428),
        (25, 0.0059407297521829605),
        (30, 0.0013718936825171113),
        (35, 9.556212899042293e-05),
        (40, 3.428102354519069e-05),
        (50, 4.411534519022098e-06),
        (63, 3.068925877869333e-07),
    ];
    for (i, expected) in reference {
        let got = f64::from(inv[i]);
        assert!(
            (got - expected).abs() <= expected * 2e-6,
            "index {i}: {got} vs {expected}"
        );
    }
}

/// One transformers case of rope-params.json.
struct HfCase {
    name: String,
    config: serde_json::Value,
    seq_len: Option<usize>,
    rope_type: String,
    rotary_dim: usize,
    inv_freq: Vec<f64>,
    attention_factor: f64,
}

fn hf_cases() -> Vec<HfCase> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/goldens/rope-params.json");
    let text = std::fs::read_to_string(&path).expect("rope-params.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let cases = json["cases"].as_array().expect("cases");
    cases
        .iter()
        .map(|c| HfCase {
            name: c["name"].as_str().unwrap().to_string(),
            config: c["config"].clone(),
            seq_len: c["seq_len"].as_u64().map(|n| n as usize),
            rope_type: c["rope_type"].as_str().unwrap().to_string(),
            rotary_dim: c["rotary_dim"].as_u64().unwrap() as usize,
            inv_freq: c["inv_freq"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect(),
            attention_factor: c["attention_factor"].as_f64().unwrap(),
        })
        .collect()
}

/// Every case: the config.json parses to the same rotary dimensions, and the inverse
/// frequencies and attention factor agree with transformers' to 1e-6 relative. transformers
/// evaluates dynamic NTK and LongRoPE for a sequence length (none: within the original
/// length); Kestrel's `rope_context_length` is set to it.
#[test]
fn scaled_frequencies_match_transformers() {
    let cases = hf_cases();
    assert_eq!(cases.len(), 12);
    for case in &cases {
        let mut c = ModelConfig::from_hf_json(&case.config.to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        c.rope_context_length = case.seq_len.unwrap_or(1);
        c.validate().unwrap();
        assert_eq!(c.rotary_dim, case.rotary_dim, "{}: rotary dims", case.name);
        let kind = c.rope_scaling.as_ref().map_or("default", |s| s.kind());
        assert_eq!(kind, case.rope_type, "{}: rope type", case.name);
        let inv = c.rope_inv_freq();
        assert_eq!(inv.len(), case.inv_freq.len(), "{}", case.name);
        for (i, (&got, &want)) in inv.iter().zip(&case.inv_freq).enumerate() {
            let rel = (f64::from(got) - want).abs() / want;
            assert!(
                rel <= 1e-6,
                "{} [{i}]: {got} vs {want} (rel {rel:.2e})",
                case.name
            );
        }
        let attention = f64::from(c.rope_attention_factor());
        let rel = (attention - case.attention_factor).abs() / case.attention_factor;
        assert!(
            rel <= 1e-6,
            "{}: attention {attention} vs {}",
            case.name,
            case.attention_factor
        );
    }
}

/// The fixture's cases differ where they should: YaRN and LongRoPE change the frequencies and
/// the attention factor; dynamic NTK past the original length changes the base, within it not.
#[test]
fn transformers_cases_exercise_the_scaling() {
    let cases = hf_cases();
    let by = |n: &str| cases.iter().find(|c| c.name == n).unwrap();
    let (short, long) = (by("longrope_short"), by("longrope_long"));
    assert!(short.inv_freq[10] > long.inv_freq[10] * 2.0);
    assert!(short.attention_factor > 1.1);
    let (within, past) = (by("dynamic_within_original"), by("dynamic_past_original"));
    assert_eq!(within.inv_freq, by("dynamic_below_original").inv_freq);
    assert!(within.inv_freq[5] > past.inv_freq[5] * 1.05);
    let yarn = by("yarn_default_betas");
    assert!(yarn.attention_factor > 1.1);
    assert!((yarn.inv_freq[31] - within.inv_freq[31] / 4.0).abs() < 1e-6 * yarn.inv_freq[31]);
    assert_eq!(by("default_partial").rotary_dim, 16);
}

/// Kestrel fixes LongRoPE's factors and the dynamic-NTK base once, from
/// `rope_context_length`: the default (`max_position_embeddings`) serves a LongRoPE model past
/// its original length with the long factors, and a dynamic model within its original length
/// with the unscaled base.
#[test]
fn static_choices_follow_the_rope_context_length() {
    let cases = hf_cases();
    let by = |n: &str| cases.iter().find(|c| c.name == n).unwrap();
    let long = by("longrope_long");
    let c = ModelConfig::from_hf_json(&long.config.to_string()).unwrap();
    assert_eq!(c.rope_context_length, c.max_position_embeddings);
    let got: Vec<f64> = c.rope_inv_freq().iter().map(|&f| f64::from(f)).collect();
    for (g, w) in got.iter().zip(&long.inv_freq) {
        assert!((g - w).abs() <= 1e-6 * w);
    }
    let within = by("dynamic_within_original");
    let c = ModelConfig::from_hf_json(&within.config.to_string()).unwrap();
    let got: Vec<f64> = c.rope_inv_freq().iter().map(|&f| f64::from(f)).collect();
    for (g, w) in got.iter().zip(&within.inv_freq) {
        assert!((g - w).abs() <= 1e-6 * w);
    }
}
