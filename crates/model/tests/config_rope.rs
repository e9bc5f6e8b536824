//! rope_inv_freq: base frequencies and linear / llama3 / per-factor scaling.

use kestrel_model::config::{Architecture, ModelConfig, RopeScaling};

fn config(head_dim: usize, theta: f32, scaling: Option<RopeScaling>) -> ModelConfig {
    ModelConfig {
        architecture: Architecture::Llama,
        vocab_size: 10,
        hidden_size: head_dim * 2,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim,
        intermediate_size: 8,
        rms_norm_eps: 1e-5,
        rope_theta: theta,
        rope_scaling: scaling,
        max_position_embeddings: 128,
        tie_word_embeddings: false,
        sliding_window: None,
        window_layers: None,
        attention_bias: false,
        qk_norm: false,
        gemma: None,
        bos_token_id: None,
        eos_token_ids: vec![],
        dtype: None,
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
