//! Reasoning output: a thinking model's `<think>…</think>` text (or harmony `analysis`
//! messages, [`crate::harmony`]) split from its answer.
//!
//! ```text
//! --reasoning-parser (or what the chat template shows) ─► ReasoningParser
//! prompt ids ─► ReasoningParser::mode ─► ReasoningMode (did the prompt open the block?)
//! generated text ─► ReplySplitter ─► Piece::Reasoning | Piece::Content | Piece::ToolCall
//!                   (ReasoningSplitter for <think>, HarmonyReader for harmony)
//! ```
//!
//! The split never eats text from a model that does not think: text is reasoning only when the
//! prompt ends inside an open `<think>` (the template opened it, as DeepSeek-R1's does) or the
//! reply itself begins with `<think>`; anything else is the answer, whole.

mod parser;
mod reply_splitter;
mod splitter;

pub use parser::{ReasoningMode, ReasoningParser, UnknownReasoningParser};
pub use reply_splitter::ReplySplitter;
pub use splitter::{Piece, ReasoningSplitter};
