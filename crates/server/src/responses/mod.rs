//! The OpenAI Responses API: `POST /v1/responses`, `GET /v1/responses/{id}` and
//! `DELETE /v1/responses/{id}`.
//!
//! A Responses request is a conversation like any chat request: validation turns its input
//! items into a [`crate::validation::chat_call::ChatCall`]
//! ([`crate::validation::responses`]), so templates, tools, structured output and limits are
//! those of chat completions. What is particular to the family lives here:
//!
//! * [`wire`] and [`items`] — the request and response bodies; [`events`] — the streamed
//!   events (data only: serde and OpenAPI schemas);
//! * [`routes`] — the handlers; [`output`] — output items, usage and the final response, shared
//!   by the whole and streamed shapes; [`stream`] — the semantic SSE encoder;
//! * [`store`] — [`store::ResponseStore`], the bounded in-memory store behind `store: true`,
//!   `GET`, `DELETE` and `previous_response_id`.
//!
//! ```text
//! Wire<ResponsesRequest> ─► previous_response_id? (store) ─► validate (blocking pool)
//!   ─► SubmittedChoices::submit ─► stream: ResponsesEncoder | collect ─► Reply::read ─► items
//!   ─► ResponseObject ─► store (store: true) ─► JSON
//! ```

pub mod events;
pub mod items;
pub mod output;
pub mod routes;
pub mod store;
pub mod stream;
pub mod wire;
