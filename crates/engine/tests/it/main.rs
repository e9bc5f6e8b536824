//! The integration tests of `kestrel-engine`, built as one test binary (one link instead of
//! one per file); each module is one former test file.

mod engine_common;

mod engine_admission;
mod engine_idle_check;
mod engine_lora;
mod engine_metrics;
mod engine_outputs;
mod engine_panic;
mod engine_scheduling;
mod engine_shutdown;
mod engine_slo_admission;
mod engine_step_trace;
mod engine_stop;
mod kv_cache_salt;
mod kv_disk_tier;
mod kv_events_disk_tier;
mod kv_prefix_cache;
mod kv_sliding_window;
mod output;
mod output_window;
mod sampling;
mod scheduler_basic;
mod scheduler_fairness;
mod scheduler_lora;
mod scheduler_preemption;
mod scheduler_proptest;
mod spec_decode;
