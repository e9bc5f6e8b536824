//! The OpenAI API family: `/v1/completions`, `/v1/chat/completions`, `/v1/models` and
//! `/v1/embeddings`.
//!
//! Like every API family folder (`tgi/` beside it; `anthropic/` and `responses/` land the same
//! way), it holds only what is particular to the family:
//!
//! * [`wire`] — its request and response bodies (data only: serde and OpenAPI schemas);
//! * [`routes`], [`embeddings`] and [`detokenize`] (vLLM's) — its handlers: parse the wire body, hand it to
//!   [`crate::validation`] (shared by all families), run it with
//!   [`crate::submitted_choices::SubmittedChoices`], shape the answer;
//! * [`api`] — how completions and chat differ (choices and chunks); [`stream`] — the SSE
//!   encoder; [`logprobs`], [`prompt_logprobs`], [`best_of`], [`tool_reply`] — response shaping.
//!
//! Cross-family pieces (SSE framing, auth, errors, metrics, the backend, validation, tools) live
//! at the crate's top level.

pub mod api;
pub mod best_of;
pub mod detokenize;
pub mod embeddings;
pub mod logprobs;
pub mod prompt_logprobs;
pub mod routes;
pub mod stream;
pub mod tool_reply;
pub mod wire;
