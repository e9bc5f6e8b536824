//! Reasoning output: a thinking model's `<think>…</think>` text split from its answer.
//!
//! ```text
//! --reasoning-parser (or what the chat template shows) ─► ReasoningParser
//! prompt ids ─► ReasoningParser::mode ─► ReasoningMode (did the prompt open the block?)
//! generated text ─► ReasoningSplitter ─► Piece::Reasoning | Piece::Content
//! ```
//!
//! The split never eats text from a model that does not think: text is reasoning only when the
//! prompt ends inside an open `<think>` (the template opened it, as DeepSeek-R1's does) or the
//! reply itself begins with `<think>`; anything else is the answer, whole.

mod parser;
mod splitter;

pub use parser::{ReasoningMode, ReasoningParser, UnknownReasoningParser};
pub use splitter::{Piece, ReasoningSplitter};
