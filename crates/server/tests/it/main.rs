//! The integration tests of `kestrel-server`, built as one test binary (one link instead of
//! one per file); each module is one former test file.

mod common;

mod anthropic_http;
mod cache_salt_http;
mod engine_panic_http;
mod fuzz_corpus_replay;
mod hardening_http;
mod harmony_http;
mod http;
mod lora_http;
mod methods_http;
mod model_registry;
mod openai_surface;
mod openapi_doc;
mod playground_http;
mod reasoning_http;
mod request_id_http;
mod responses_http;
mod slo_admission_http;
mod speculative_launch;
mod structured_http;
mod tool_parsers;
mod tools_http;
