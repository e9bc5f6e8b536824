//! The integration tests of `kestrel-quant`, built as one test binary (one link instead of
//! one per file); each module is one former test file.

#[path = "../../../model/tests/it/common/mod.rs"]
mod common;

mod convert_roundtrip;
mod import_awq_gptq;
mod lora_merge;
mod perplexity_default;
mod quantize_methods;
mod quantize_toolkit;
