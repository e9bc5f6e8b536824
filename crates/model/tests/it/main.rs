//! The integration tests of `kestrel-model`, built as one test binary (one link instead of
//! one per file); each module is one former test file.

mod common;
mod gguf_common;
mod tokenizer_common;

mod chat_prompt_injection;
mod chat_template_builtin;
mod chat_template_hf;
mod chat_template_tools;
mod config_gguf;
mod config_hf;
mod config_moe;
mod config_rope;
mod dequant_real_tensors;
mod embedding_tiny_llama;
mod engine_batching;
mod fuzz_corpus_replay;
mod gguf_corrupt;
mod gguf_hostile_counts;
mod gguf_real_model;
mod gguf_roundtrip;
mod golden_gemma3_270m;
mod golden_smollm2;
mod golden_tiny_bloom;
mod golden_tiny_gemma;
mod golden_tiny_gpt_oss;
mod golden_tiny_llama;
mod golden_tiny_moe;
mod golden_tiny_phi3;
mod golden_tiny_qwen;
mod iquant_model;
mod kv_cache_dtype;
mod kv_sliding_window;
mod lora_refusals;
mod lora_smollm2;
mod lora_tiny_llama;
mod lora_tiny_phi3;
mod moe_block_reference;
mod moe_metrics;
mod moe_packed_experts;
mod prompt_logprobs_tiny_llama;
mod safetensors_checkpoint;
mod spec_decode_real_model;
mod structured_output;
mod tokenizer_smollm2_golden;
mod tokenizer_tiny;
