//! ModelConfig::from_hf_json with older and transformers-5 key styles, defaults and errors.

use kestrel_model::config::{ConfigError, ModelConfig, RopeScaling};

const SMOLLM2_OLD_STYLE: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
  "max_position_embeddings": 8192, "num_attention_heads": 9, "num_hidden_layers": 30,
  "num_key_value_heads": 3, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 100000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "vocab_size": 49152
}"#;

const LLAMA31_TRANSFORMERS5: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "head_dim": 128, "rms_norm_eps": 1e-05, "dtype": "bfloat16", "vocab_size": 128256,
  "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
}"#;

#[test]
fn older_key_style() {
    let c = ModelConfig::from_hf_json(SMOLLM2_OLD_STYLE).unwrap();
    assert_eq!(c.architecture.name(), "llama");
    assert_eq!(
        (c.vocab_size, c.hidden_size, c.n_layers, c.intermediate_size),
        (49152, 576, 30, 1536)
    );
    assert_eq!(
        (c.n_heads, c.n_kv_heads, c.head_dim, c.group_size()),
        (9, 3, 64, 3)
    );
    assert_eq!(
        (c.rope_theta, c.rms_norm_eps, c.max_position_embeddings),
        (100000.0, 1e-5, 8192)
    );
    assert_eq!(c.rope_scaling, None);
    assert!(c.tie_word_embeddings && !c.attention_bias);
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(1), vec![2])
    );
    assert_eq!(c.dtype.as_deref(), Some("bfloat16"));
}

#[test]
fn transformers5_key_style_with_llama3_scaling() {
    let c = ModelConfig::from_hf_json(LLAMA31_TRANSFORMERS5).unwrap();
    assert_eq!(c.rope_theta, 500000.0);
    assert_eq!(
        c.rope_scaling,
        Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192
        })
    );
    assert_eq!(c.eos_token_ids, vec![128001, 128008, 128009]);
    assert_eq!(c.dtype.as_deref(), Some("bfloat16"));
    assert_eq!((c.head_dim, c.n_kv_heads), (128, 8));
    assert!(!c.tie_word_embeddings, "LlamaConfig default");
}

#[test]
fn older_rope_scaling_with_type_key_and_defaults() {
    let json = r#"{"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128,
        "rope_scaling": {"type": "linear", "factor": 4.0}}"#;
    let c = ModelConfig::from_hf_json(json).unwrap();
    assert_eq!(c.rope_scaling, Some(RopeScaling::Linear { factor: 4.0 }));
    assert_eq!(
        (c.n_kv_heads, c.head_dim),
        (4, 16),
        "defaults: n_heads and hidden/n_heads"
    );
    assert_eq!(
        (c.rope_theta, c.rms_norm_eps, c.max_position_embeddings),
        (10000.0, 1e-6, 2048)
    );
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.len(), c.dtype.clone()),
        (None, 0, None)
    );
}

#[test]
fn qwen2_and_mistral_specifics() {
    let qwen = r#"{"architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936, "hidden_size": 896,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "intermediate_size": 4864, "rope_theta": 1000000.0, "sliding_window": 32768,
        "use_sliding_window": false, "max_window_layers": 21, "tie_word_embeddings": true,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-06}"#;
    let c = ModelConfig::from_hf_json(qwen).unwrap();
    assert_eq!(c.architecture.name(), "qwen2");
    assert!(c.attention_bias, "Qwen2 always has q/k/v biases");
    assert_eq!(c.sliding_window, None, "use_sliding_window is false");
    assert_eq!(c.window_layers, None);
    assert!(!c.qk_norm, "Qwen2 has no q/k norm");

    let mistral = r#"{"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "sliding_window": 4096}"#;
    let c = ModelConfig::from_hf_json(mistral).unwrap();
    assert_eq!(
        (c.architecture.name(), c.sliding_window),
        ("mistral", Some(4096))
    );
    let no_window = mistral.replace("\"sliding_window\": 4096", "\"sliding_window\": null");
    assert_eq!(
        ModelConfig::from_hf_json(&no_window)
            .unwrap()
            .sliding_window,
        None
    );
}

/// Qwen2/Qwen3 slide only with `use_sliding_window`, on layers `max_window_layers..` (as
/// transformers' config classes derive `layer_types`), or as `layer_types` lists them.
#[test]
fn qwen_sliding_window_per_layer() {
    let qwen = |extra: &str| {
        format!(
            r#"{{"model_type": "qwen2", "vocab_size": 32, "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128{extra}}}"#
        )
    };
    let windows = |extra: &str| {
        let c = ModelConfig::from_hf_json(&qwen(extra)).unwrap();
        (0..c.n_layers)
            .map(|l| c.layer_window(l))
            .collect::<Vec<_>>()
    };
    assert_eq!(windows(""), [None; 4], "off by default");
    assert_eq!(
        windows(r#", "sliding_window": 16, "max_window_layers": 1"#),
        [None; 4],
        "use_sliding_window is false"
    );
    assert_eq!(
        windows(r#", "use_sliding_window": true, "sliding_window": 16, "max_window_layers": 2"#),
        [None, None, Some(16), Some(16)]
    );
    assert_eq!(
        windows(r#", "use_sliding_window": true, "max_window_layers": 0"#),
        [Some(4096); 4],
        "default window 4096, every layer"
    );
    assert_eq!(
        windows(r#", "use_sliding_window": true, "sliding_window": 8"#),
        [None; 4],
        "default max_window_layers 28 is past the last layer"
    );
    let listed = r#", "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 0,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]"#;
    assert_eq!(
        windows(listed),
        [Some(8), None, Some(8), None],
        "layer_types wins"
    );
    let every = ModelConfig::from_hf_json(&qwen(
        r#", "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 0"#,
    ))
    .unwrap();
    assert_eq!((every.sliding_window, every.window_layers), (Some(8), None));
    let short = r#", "use_sliding_window": true, "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"]"#;
    assert!(matches!(
        ModelConfig::from_hf_json(&qwen(short)),
        Err(ConfigError::Invalid(_))
    ));
    let bad = r#", "use_sliding_window": true, "sliding_window": 8,
        "layer_types": ["local", "full_attention", "full_attention", "full_attention"]"#;
    assert!(matches!(
        ModelConfig::from_hf_json(&qwen(bad)),
        Err(ConfigError::BadField { ref field, .. }) if field == "layer_types"
    ));
}

#[test]
fn qwen3_has_qk_norm_and_its_own_head_dim() {
    let text = r#"{"architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "hidden_size": 1024,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 3072, "rope_theta": 1000000, "attention_bias": false,
        "use_sliding_window": false, "sliding_window": null, "max_window_layers": 28,
        "tie_word_embeddings": true, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06}"#;
    let c = ModelConfig::from_hf_json(text).unwrap();
    assert_eq!(c.architecture.name(), "qwen3");
    assert!(c.qk_norm && !c.attention_bias && c.tie_word_embeddings);
    assert_eq!(
        (c.head_dim, c.n_heads * c.head_dim, c.hidden_size),
        (128, 2048, 1024)
    );
    assert_eq!((c.sliding_window, c.rope_theta), (None, 1e6));
}

#[test]
fn errors_name_the_problem() {
    let base: serde_json::Value = serde_json::from_str(SMOLLM2_OLD_STYLE).unwrap();
    let with = |key: &str, value: serde_json::Value| {
        let mut v = base.clone();
        v[key] = value;
        ModelConfig::from_hf_json(&v.to_string())
    };
    let without = |key: &str| {
        let mut v = base.clone();
        v.as_object_mut().unwrap().remove(key);
        ModelConfig::from_hf_json(&v.to_string())
    };
    assert!(
        matches!(without("vocab_size"), Err(ConfigError::MissingField(ref k)) if k == "vocab_size")
    );
    assert!(
        matches!(with("num_key_value_heads", 4.into()), Err(ConfigError::Invalid(ref m)) if m.contains("multiple"))
    );
    assert!(matches!(
        with("hidden_size", 0.into()),
        Err(ConfigError::Invalid(_))
    ));
    assert!(matches!(
        with("num_attention_heads", 0.into()),
        Err(ConfigError::Invalid(_))
    ));
    assert!(matches!(
        with("num_attention_heads", 7.into()),
        Err(ConfigError::Invalid(_))
    ));
    assert!(
        matches!(with("hidden_size", "576".into()), Err(ConfigError::BadField { ref field, .. }) if field == "hidden_size")
    );
    let e = with("model_type", "gpt2".into()).unwrap_err();
    assert!(matches!(e, ConfigError::UnsupportedArchitecture(ref a) if a == "gpt2"));
    assert_eq!(
        e.to_string(),
        "unsupported architecture \"gpt2\" (Kestrel runs llama, mistral, qwen2, qwen3, phi3, bloom, mixtral, qwen2_moe, qwen3_moe, gemma2, gemma3, gpt_oss, deepseek_v2, deepseek_v3)"
    );
    let unknown = serde_json::json!({"rope_type": "ntk-by-parts", "factor": 4.0});
    let e = with("rope_scaling", unknown).unwrap_err();
    assert!(matches!(e, ConfigError::UnsupportedRopeScaling(ref t) if t == "ntk-by-parts"));
    assert!(
        e.to_string()
            .contains("linear, llama3, yarn, dynamic, longrope"),
        "{e}"
    );
    let no_factors = serde_json::json!({"rope_type": "longrope", "short_factor": [1.0]});
    assert!(matches!(
        with("rope_scaling", no_factors),
        Err(ConfigError::MissingField(ref f)) if f == "rope_scaling.long_factor"
    ));
    let short =
        serde_json::json!({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0]});
    assert!(matches!(
        with("rope_scaling", short),
        Err(ConfigError::Invalid(_))
    ));
    assert!(matches!(
        with("partial_rotary_factor", 1.5.into()),
        Err(ConfigError::BadField { ref field, .. }) if field == "partial_rotary_factor"
    ));
    let no_factor = serde_json::json!({"rope_type": "linear"});
    assert!(matches!(
        with("rope_scaling", no_factor),
        Err(ConfigError::MissingField(_))
    ));
    let inverted = serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
        "high_freq_factor": 1.0, "original_max_position_embeddings": 8192});
    assert!(matches!(
        with("rope_scaling", inverted),
        Err(ConfigError::Invalid(_))
    ));
    assert!(matches!(
        ModelConfig::from_hf_json("[1]"),
        Err(ConfigError::BadField { .. })
    ));
    assert!(matches!(
        ModelConfig::from_hf_json("{"),
        Err(ConfigError::Json(_))
    ));
}

/// BLOOM's config (bigscience/bloom-560m's keys): `n_head`, `n_layer`, `layer_norm_epsilon`,
/// no intermediate size (4 × hidden), one K/V head per head, tied head by default; the
/// `num_attention_heads` alias works; an unsupported residual variant is refused.
#[test]
fn bloom_config() {
    let json = r#"{"architectures": ["BloomForCausalLM"], "model_type": "bloom",
        "hidden_size": 1024, "n_head": 16, "n_layer": 24, "layer_norm_epsilon": 1e-05,
        "vocab_size": 250880, "bos_token_id": 1, "eos_token_id": 2,
        "apply_residual_connection_post_layernorm": false, "pretraining_tp": 1,
        "slow_but_exact": false}"#;
    let c = ModelConfig::from_hf_json(json).unwrap();
    assert_eq!(c.architecture.name(), "bloom");
    assert_eq!(
        (
            c.n_heads,
            c.n_kv_heads,
            c.head_dim,
            c.n_layers,
            c.intermediate_size
        ),
        (16, 16, 64, 24, 4096)
    );
    assert_eq!((c.rms_norm_eps, c.max_position_embeddings), (1e-5, 2048));
    assert!(c.tie_word_embeddings && c.attention_bias && !c.qk_norm);
    let alias = json.replace("\"n_head\"", "\"num_attention_heads\"");
    assert_eq!(ModelConfig::from_hf_json(&alias).unwrap().n_heads, 16);
    let post = json.replace(
        "\"apply_residual_connection_post_layernorm\": false",
        "\"apply_residual_connection_post_layernorm\": true",
    );
    let err = ModelConfig::from_hf_json(&post).unwrap_err().to_string();
    assert!(
        err.contains("apply_residual_connection_post_layernorm"),
        "{err}"
    );
}
