//! The Anthropic API family: Messages (`POST /v1/messages`, `POST /v1/messages/count_tokens`),
//! so that Anthropic's SDKs and Claude Code can use Kestrel.
//!
//! Like every family folder, it holds only what is particular to the family:
//!
//! * [`wire`] — request and response bodies, error envelope (data only: serde and OpenAPI
//!   schemas);
//! * [`convert`] — a Messages body read into the [`crate::validation::chat_call::ChatCall`]
//!   every chat API validates (system, content blocks, tool turns, tools, `tool_choice`,
//!   `thinking`), so tools are constrained and parsed as on chat completions;
//! * [`routes`] — the handlers; [`message`] — the whole reply's content blocks, stop reason
//!   and usage; [`stream`] — the named server-sent events; [`stop`] — which stop sequence
//!   ended a reply; [`error`] — Anthropic's error shape (529 when overloaded).

pub mod convert;
pub mod error;
pub mod message;
pub mod routes;
pub mod stop;
pub mod stream;
pub mod wire;

/// The path prefix of the family's routes.
pub const PATH_PREFIX: &str = "/v1/messages";

/// Whether `path` is one of the family's routes (whose errors, authentication's included,
/// take Anthropic's shape).
pub fn owns_path(path: &str) -> bool {
    path == PATH_PREFIX || path.starts_with("/v1/messages/")
}
