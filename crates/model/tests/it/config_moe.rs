//! Mixture-of-experts configuration from HF `config.json`: Mixtral's keys, Qwen-MoE's dense
//! layers (`mlp_only_layers`, `decoder_sparse_step`, as transformers decides them), the shared
//! expert, and invalid expert counts refused.

use kestrel_model::config::{ConfigError, ModelConfig};

fn config(model_type: &str, extra: &str) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_hf_json(&format!(
        r#"{{"model_type": "{model_type}", "vocab_size": 100, "hidden_size": 64,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 96{extra}}}"#
    ))
}

#[test]
fn mixtral_routes_top_k_of_its_local_experts_renormalised() {
    let c = config(
        "mixtral",
        r#", "num_local_experts": 8, "num_experts_per_tok": 2"#,
    )
    .unwrap();
    assert_eq!(c.architecture.name(), "mixtral");
    let m = c.moe.unwrap();
    assert_eq!((m.n_experts, m.top_k, m.expert_ffn), (8, 2, 96));
    assert!(m.norm_topk_prob && m.shared_expert_ffn.is_none());
    assert_eq!(m.sparse_layers, [true; 4]);
    assert_eq!(c.sliding_window, None, "Mixtral has no window unless set");
}

#[test]
fn qwen_moe_dense_layers_follow_mlp_only_layers_and_the_sparse_step() {
    let c = config(
        "qwen2_moe",
        r#", "num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48, "decoder_sparse_step": 2, "mlp_only_layers": [3]"#,
    )
    .unwrap();
    assert_eq!(c.architecture.name(), "qwen2_moe");
    assert!(c.attention_bias, "qkv_bias defaults to true");
    let m = c.moe.unwrap();
    assert_eq!(m.sparse_layers, [false, true, false, false]);
    assert_eq!((m.expert_ffn, m.shared_expert_ffn), (32, Some(48)));
    assert!(!m.norm_topk_prob, "norm_topk_prob defaults to false");
    let c3 = config(
        "qwen3_moe",
        r#", "num_experts": 4, "moe_intermediate_size": 32, "num_experts_per_tok": 2, "norm_topk_prob": true"#,
    )
    .unwrap();
    assert!(c3.qk_norm && !c3.attention_bias);
    let m3 = c3.moe.unwrap();
    assert!(m3.norm_topk_prob && m3.shared_expert_ffn.is_none());
}

#[test]
fn more_experts_per_token_than_experts_is_refused() {
    let err = config(
        "mixtral",
        r#", "num_local_experts": 2, "num_experts_per_tok": 3"#,
    );
    assert!(matches!(err, Err(ConfigError::Invalid(_))), "{err:?}");
    let err = config(
        "qwen3_moe",
        r#", "num_experts": 4, "num_experts_per_tok": 2"#,
    );
    assert!(matches!(err, Err(ConfigError::MissingField(_))), "{err:?}");
}
