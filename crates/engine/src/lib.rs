//! Kestrel's serving engine. No tensor code lives here: the model runner plugs in from the
//! `model` crate.
//!
//! * [`sampling`] — [`sampling::SamplingParams`] and the [`sampling::Sampler`] that turns a
//!   logits row into a token (greedy, temperature, top-k/top-p/min-p, penalties, seeded RNG).
//! * [`logit_bias`] — [`logit_bias::LogitBias`], OpenAI's per-token logit bias.
//! * [`output`] — incremental detokenization that never emits broken UTF-8, and stop strings.
//! * [`request`] — [`request::Request`]: the one entry per request (tokens,
//!   `num_computed_tokens`, status, block table, its [`request::Generation`]: sampler,
//!   detokenizer, stop strings, event channel; and its [`speculative::SpecState`]).
//! * [`kv`] — paged KV bookkeeping: [`kv::BlockPool`] (ref counts, O(1) LRU free list, prefix
//!   cache) and [`kv::KvCacheManager`] (block tables, prefix hits, allocation).
//! * [`scheduler`] — the continuous-batching [`scheduler::Scheduler`]: `schedule` returns a
//!   [`scheduler::SchedulerOutput`] (convertible to an [`executor::BatchInput`]), `update`
//!   applies sampled tokens; queue order, victims and admission deferral are a
//!   [`scheduler::SchedulingPolicy`] ([`scheduler::PriorityFcfs`]).
//! * [`model_failure`] — [`model_failure::ModelFailure`]: the typed cause of a request the
//!   model step failed (forward pass, logits, sampling, structured output).
//! * [`mock_executor`] — a deterministic, validating [`executor::Executor`] for engine tests.
//! * [`prompt_pass`] — one-off passes over a prompt (embeddings, prompt logprobs), KV blocks
//!   lent per call.
//! * [`core`] — [`core::EngineCore`]: the step loop (schedule, execute, sample, update, stream).
//! * [`handle`] — [`handle::EngineHandle`]: the engine thread, `submit` and
//!   [`handle::ResponseStream`]; [`api`] holds the value types it speaks, among them
//!   [`api::EngineRequest`], which can only be built validated; [`config::EngineConfig`] its
//!   limits (the KV geometry comes from the executor).
//! * [`adapter_id`] — [`adapter_id::AdapterId`]: the LoRA adapter a request runs with (carried
//!   to the executor in each [`executor::SeqBatch`], and part of the prefix-cache key).
//! * [`adapters`] — [`adapters::AdapterCatalog`]: the adapters registered by name, which are
//!   resident in the executor (LRU eviction under `max_cpu_loras`), and the `max_loras` /
//!   `max_lora_rank` limits; loads and unloads arrive as commands on the engine thread.
//! * [`expert_counts`] — tokens routed per expert of a mixture-of-experts model.
//! * [`lora_metrics`] — the LoRA gauge (`vllm:lora_requests_info`) and load/eviction counters.
//! * [`metrics`] — the engine's Prometheus-style metrics, recorded through the `metrics` facade.
//! * [`ttft_predictor`] — [`ttft_predictor::TtftPredictor`]: the first-token latency a new
//!   request would see, from the queue ahead of it and the measured step costs; requests with a
//!   first-token objective it cannot meet are refused at admission.
//! * [`speculative`] — speculative decoding: n-gram and draft-model proposers, draft
//!   verification by rejection sampling, back-off under load.

// Non-test code states its invariants instead of unwrapping (see the workspace's clippy lints).
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod adapter_id;
pub mod adapters;
pub mod api;
pub mod config;
pub mod constraint;
pub mod core;
pub mod executor;
pub mod expert_counts;
pub mod handle;
pub mod kv;
pub mod kv_tier_metrics;
pub mod logit_bias;
pub mod lora_metrics;
pub mod metrics;
pub mod mock_executor;
pub mod model_failure;
pub mod output;
pub mod prompt_pass;
pub mod request;
pub mod sampling;
pub mod scheduler;
pub mod speculative;
pub mod step_trace;
pub mod trace_parent;
pub mod ttft_predictor;
