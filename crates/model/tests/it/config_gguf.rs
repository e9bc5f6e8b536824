//! ModelConfig::from_gguf on small synthetic GGUF files.

use kestrel_kernels::{DType, SharedBytes};
use kestrel_model::config::{ConfigError, ModelConfig, RopeScaling};
use kestrel_model::families;
use kestrel_model::weights::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue};

fn writer(arch: &str, extra: Vec<(&str, MetaValue)>) -> GgufWriter {
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("{arch}.{s}");
    let mut meta = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String(arch.into()),
        ),
        (k("block_count"), MetaValue::U32(2)),
        (k("embedding_length"), MetaValue::U32(64)),
        (k("feed_forward_length"), MetaValue::U32(128)),
        (k("attention.head_count"), MetaValue::U32(4)),
        (k("attention.head_count_kv"), MetaValue::U32(2)),
        (k("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6)),
        (k("context_length"), MetaValue::U64(4096)),
        (k("rope.dimension_count"), MetaValue::U32(16)),
        (
            "tokenizer.ggml.tokens".to_string(),
            MetaValue::Array(MetaArray::String(vec!["a".into(); 32])),
        ),
        ("tokenizer.ggml.eos_token_id".to_string(), MetaValue::U32(3)),
    ];
    for (key, v) in extra {
        match meta.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => meta.push((key.to_string(), v)),
        }
    }
    for (key, v) in meta {
        w.add_metadata(&key, v).unwrap();
    }
    w
}

fn open(w: &GgufWriter) -> GgufFile {
    GgufFile::from_bytes(SharedBytes::from_vec(w.to_bytes().unwrap())).unwrap()
}

fn f32_tensor(w: &mut GgufWriter, name: &str, shape: &[usize], values: &[f32]) {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor(name, DType::F32, shape, bytes).unwrap();
}

#[test]
fn defaults_and_derived_fields() {
    let mut w = writer("llama", vec![]);
    f32_tensor(&mut w, "token_embd.weight", &[32, 64], &[0.0; 32 * 64]);
    f32_tensor(&mut w, "output.weight", &[32, 64], &[0.0; 32 * 64]);
    let c = ModelConfig::from_gguf(&open(&w)).unwrap();
    assert_eq!(c.architecture.name(), "llama");
    assert_eq!(
        (c.vocab_size, c.hidden_size, c.n_layers, c.intermediate_size),
        (32, 64, 2, 128)
    );
    assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (4, 2, 16));
    assert_eq!(
        (c.rope_theta, c.rms_norm_eps, c.max_position_embeddings),
        (10000.0, 1e-6, 4096)
    );
    assert!(!c.tie_word_embeddings, "output.weight present");
    assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (None, vec![3]));
}

#[test]
fn qwen2_bias_vocab_key_and_linear_scaling() {
    let extra = vec![
        ("qwen2.vocab_size", MetaValue::U32(40)),
        ("qwen2.rope.freq_base", MetaValue::F32(1e6)),
        (
            "qwen2.rope.scaling.type",
            MetaValue::String("linear".into()),
        ),
        ("qwen2.rope.scaling.factor", MetaValue::F32(2.0)),
        ("qwen2.attention.sliding_window", MetaValue::U32(1024)),
    ];
    let mut w = writer("qwen2", extra);
    f32_tensor(&mut w, "blk.0.attn_q.bias", &[64], &[0.0; 64]);
    let c = ModelConfig::from_gguf(&open(&w)).unwrap();
    assert_eq!(c.architecture.name(), "qwen2");
    assert_eq!(
        c.vocab_size, 40,
        "{{arch}}.vocab_size wins over the token list"
    );
    assert!(c.attention_bias && c.tie_word_embeddings);
    assert_eq!(c.rope_theta, 1e6);
    assert_eq!(c.rope_scaling, Some(RopeScaling::Linear { factor: 2.0 }));
    assert_eq!(c.sliding_window, Some(1024));
}

#[test]
fn qwen3_has_qk_norm_and_key_length_head_dim() {
    let extra = vec![
        ("qwen3.attention.key_length", MetaValue::U32(24)),
        ("qwen3.attention.value_length", MetaValue::U32(24)),
        ("qwen3.rope.dimension_count", MetaValue::U32(24)),
    ];
    let c = ModelConfig::from_gguf(&open(&writer("qwen3", extra))).unwrap();
    assert_eq!(c.architecture.name(), "qwen3");
    assert!(c.qk_norm && !c.attention_bias);
    assert_eq!((c.head_dim, c.hidden_size, c.n_heads), (24, 64, 4));
    let c = ModelConfig::from_gguf(&open(&writer("llama", vec![]))).unwrap();
    assert!(!c.qk_norm);
}

/// GGUF RoPE pairing per architecture, as llama.cpp's `llama_model_rope_type`: its converter
/// permutes Q/K rows for adjacent-pair ("normal") rope only in the Llama family; Qwen2/Qwen3
/// GGUFs keep HF's rotate-half order (NeoX). HF checkpoints are NeoX whatever the architecture.
#[test]
fn rope_style_follows_the_gguf_architecture() {
    use kestrel_kernels::cpu::ops::RopeStyle;
    use kestrel_model::arch::TensorNaming;
    let gguf = |name: &str| {
        let c = ModelConfig::from_gguf(&open(&writer(name, vec![]))).unwrap();
        TensorNaming::Gguf.rope_style(c.architecture)
    };
    assert_eq!(gguf("llama"), RopeStyle::Interleaved);
    assert_eq!(gguf("mistral"), RopeStyle::Interleaved);
    assert_eq!(gguf("qwen2"), RopeStyle::Neox);
    assert_eq!(gguf("qwen3"), RopeStyle::Neox);
    for arch in families::all() {
        assert_eq!(TensorNaming::HuggingFace.rope_style(arch), RopeStyle::Neox);
    }
}

#[test]
fn rope_freqs_tensor_becomes_frequency_factors() {
    let mut w = writer("llama", vec![]);
    let factors = [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0];
    f32_tensor(&mut w, "rope_freqs.weight", &[8], &factors);
    let c = ModelConfig::from_gguf(&open(&w)).unwrap();
    assert_eq!(
        c.rope_scaling,
        Some(RopeScaling::FreqFactors {
            factors: factors.to_vec()
        })
    );
    let inv = c.rope_inv_freq();
    assert!((inv[7] - 10000f32.powf(-14.0 / 16.0) / 8.0).abs() < 1e-9);
}

#[test]
fn errors() {
    let valid = writer("llama", vec![]);
    let mut bytes_w = GgufWriter::new();
    bytes_w
        .add_metadata("general.architecture", MetaValue::String("llama".into()))
        .unwrap();
    let e = ModelConfig::from_gguf(&open(&bytes_w)).unwrap_err();
    assert!(
        matches!(e, ConfigError::MissingField(ref k) if k == "llama.embedding_length"),
        "{e}"
    );

    let w = writer("gpt2", vec![]);
    let e = ModelConfig::from_gguf(&open(&w)).unwrap_err();
    assert!(matches!(e, ConfigError::UnsupportedArchitecture(ref a) if a == "gpt2"));
    assert!(e.to_string().contains("\"gpt2\""), "{e}");

    let w = writer(
        "llama",
        vec![("llama.rope.scaling.type", MetaValue::String("ntk".into()))],
    );
    let e = ModelConfig::from_gguf(&open(&w)).unwrap_err();
    assert!(matches!(e, ConfigError::UnsupportedRopeScaling(ref t) if t == "ntk"));
    assert_eq!(
        e.to_string(),
        "unsupported rope scaling \"ntk\" (Kestrel supports linear, llama3, yarn, dynamic, longrope (su))"
    );
    let w = writer(
        "llama",
        vec![("llama.rope.scaling.type", MetaValue::String("yarn".into()))],
    );
    assert!(matches!(
        ModelConfig::from_gguf(&open(&w)),
        Err(ConfigError::MissingField(ref k)) if k == "llama.rope.scaling.factor"
    ));

    let w = writer(
        "llama",
        vec![("llama.attention.key_length", MetaValue::U32(32))],
    );
    let c = ModelConfig::from_gguf(&open(&w)).expect("partial rotary is read");
    assert_eq!((c.head_dim, c.rotary_dim), (32, 16));
    let w = writer(
        "llama",
        vec![
            ("llama.attention.key_length", MetaValue::U32(32)),
            ("llama.rope.dimension_count", MetaValue::U32(48)),
        ],
    );
    assert!(matches!(
        ModelConfig::from_gguf(&open(&w)),
        Err(ConfigError::Invalid(_))
    ));

    let w = writer(
        "llama",
        vec![("llama.attention.head_count_kv", MetaValue::U32(3))],
    );
    assert!(matches!(
        ModelConfig::from_gguf(&open(&w)),
        Err(ConfigError::Invalid(_))
    ));

    let w = writer(
        "llama",
        vec![("llama.block_count", MetaValue::String("2".into()))],
    );
    let e = ModelConfig::from_gguf(&open(&w)).unwrap_err();
    assert!(e.to_string().contains("llama.block_count"), "{e}");

    let mut w = writer("llama", vec![]);
    f32_tensor(&mut w, "token_embd.weight", &[31, 64], &[0.0; 31 * 64]);
    let e = ModelConfig::from_gguf(&open(&w)).unwrap_err();
    assert!(
        matches!(e, ConfigError::TensorShape { ref found, .. } if found == &[64, 31]),
        "{e}"
    );

    assert!(ModelConfig::from_gguf(&open(&valid)).is_ok());
}

#[test]
fn head_products_beyond_any_tensor_are_refused() {
    let w = writer(
        "llama",
        vec![
            ("llama.attention.head_count", MetaValue::U32(1 << 31)),
            ("llama.attention.head_count_kv", MetaValue::U32(1)),
            ("llama.attention.key_length", MetaValue::U32(1 << 31)),
        ],
    );
    let e = ModelConfig::from_gguf(&open(&w)).unwrap_err();
    assert!(
        matches!(e, ConfigError::Invalid(ref m) if m.contains("n_heads * head_dim")),
        "{e}"
    );
}
