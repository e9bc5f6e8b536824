//! The integration tests of `kestrel-kernels`, built as one test binary (one link instead of
//! one per file); each module is one former test file.

mod attention_common;

mod cpu_attention_alibi;
mod cpu_attention_block_table;
mod cpu_attention_chunks;
mod cpu_attention_kv_storage;
mod cpu_attention_latent;
mod cpu_attention_paths;
mod cpu_attention_reference;
mod cpu_attention_sinks;
mod cpu_attention_softcap;
mod cpu_attention_threads;
mod cpu_bf16_tiles;
mod cpu_gemm;
mod cpu_low_rank;
mod cpu_ops;
mod cpu_packed;
mod cpu_threadpool;
mod dequant_reference;
mod gemv_rows;
mod iquant_weights;
mod kquant_q8k;
mod kquant_weights;
mod legacy_act;
mod legacy_float;
mod legacy_quant;
mod toolkit_quant;
