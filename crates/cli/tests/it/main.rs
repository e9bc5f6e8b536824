//! The integration tests of `kestrel-cli`, built as one test binary (one link instead of
//! one per file); each module is one former test file.

mod cli_common;
mod fleet_common;

mod bench_compare;
mod bench_multi_turn;
mod chat_cli;
mod cli;
mod fleet;
mod fleet_lora;
mod fleet_models;
mod fleet_on_demand;
mod fleet_parity;
mod fleet_request_context;
mod fleet_restart;
mod fleet_routing;
mod kv_disk_cli;
mod kv_dtype_cli;
mod lora_cli;
mod operator_cli;
mod otlp_traces;
mod quant_cli;
mod serve_hardening;
mod serve_lora;
mod serve_memory;
mod serve_models;
mod serve_quantize;
mod speed_cli;
