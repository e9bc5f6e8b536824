//! The real default model (SmolLM2-135M-Instruct, Q4_1), found through KESTREL_DEFAULT_MODEL.
//! Expected values were read from the file with the Python `gguf` package.

use kestrel_kernels::DType;
use kestrel_model::config::ModelConfig;
use kestrel_model::weights::gguf::GgufFile;
use kestrel_model::weights::TensorSource;

fn open_default_model() -> GgufFile {
    let path = std::env::var("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL must point at SmolLM2-135M-Instruct.Q4_1.gguf for this test",
    );
    GgufFile::open(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("opening {path}: {e}"))
}

#[test]
fn header_metadata_and_tensor_table() {
    let f = open_default_model();
    assert_eq!(f.version(), 3);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.file_size(), 98_362_432);
    assert_eq!((f.alignment(), f.data_start()), (32, 1_785_664));
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(f.get_f32("llama.rope.freq_base").unwrap(), 100000.0);
    let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(
        &tokens[..3],
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    );
    assert_eq!(tokens[49151], "ectable");
    assert_eq!(
        f.get_str_array("tokenizer.ggml.merges").unwrap().len(),
        48900
    );
    assert_eq!(
        f.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        49152
    );
    assert!(f
        .get_str("tokenizer.chat_template")
        .unwrap()
        .starts_with("{% for message in messages %}"));
    assert!(!f.get_bool("tokenizer.ggml.add_bos_token").unwrap());

    let count = |t: DType| f.tensors().iter().filter(|i| i.dtype == t).count();
    assert_eq!(
        (count(DType::Q4_1), count(DType::F32), count(DType::Q8_0)),
        (210, 61, 1)
    );
}

#[test]
fn tensors_have_expected_shapes_and_bytes() {
    let f = open_default_model();
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.dtype, embd.shape.clone()),
        (DType::Q8_0, vec![49152, 576])
    );
    assert_eq!(embd.data.len(), 30_081_024);
    assert_eq!(
        &embd.data[..8],
        &[0x32, 0x19, 0xd6, 0x0d, 0x13, 0xf7, 0xe5, 0xee]
    );
    let down = f.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(
        (down.dtype, down.shape.clone()),
        (DType::Q4_1, vec![576, 1536])
    );
    let norm = f.tensor("output_norm.weight").unwrap();
    assert_eq!(
        f.tensor_info("output_norm.weight").unwrap().offset,
        98_360_128 - 1_785_664
    );
    let first: Vec<f32> = norm.data[..16]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(first, [1.7578125, 1.8203125, 1.78125, 1.6015625]);
    assert!(f.tensor("output.weight").is_none());
}

#[test]
fn config_from_the_real_file() {
    let f = open_default_model();
    let c = ModelConfig::from_gguf(&f).unwrap();
    assert_eq!(c.architecture.name(), "llama");
    assert_eq!((c.vocab_size, c.hidden_size, c.n_layers), (49152, 576, 30));
    assert_eq!(
        (c.n_heads, c.n_kv_heads, c.head_dim, c.intermediate_size),
        (9, 3, 64, 1536)
    );
    assert_eq!((c.rope_theta, c.rms_norm_eps), (100000.0, 1e-5));
    assert_eq!(c.max_position_embeddings, 8192);
    assert!(
        c.tie_word_embeddings,
        "no output.weight: the LM head is the embedding"
    );
    assert!(!c.attention_bias);
    assert_eq!((c.rope_scaling.clone(), c.sliding_window), (None, None));
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(1), vec![2])
    );
    let inv = c.rope_inv_freq();
    assert_eq!(inv.len(), 32);
    assert_eq!(inv[0], 1.0);
    assert!((inv[31] / (100000f64.powf(-62.0 / 64.0) as f32) - 1.0).abs() < 1e-6);
}
