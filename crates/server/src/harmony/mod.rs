//! The harmony format (gpt-oss): a reply is a sequence of messages, each a header and a body —
//!
//! ```text
//! <|channel|>analysis<|message|>…reasoning…<|end|>
//! <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>
//! <|start|>assistant<|channel|>final<|message|>…answer…<|return|>
//! ```
//!
//! (the prompt ends with `<|start|>assistant`, so the first header starts without it; the
//! recipient `to=` may come before or after the channel). [`HarmonyReader`] reads a reply as it
//! streams into [`HarmonyEvent`]s: the `analysis` channel is reasoning, `final` (and
//! `commentary` without a recipient) the answer, a message to `functions.NAME` a tool call.
//! Text that does not start with a header is all answer (a forced tool call's JSON, or a model
//! that does not write harmony).

mod header;
mod reader;

pub use header::Header;
pub use reader::{HarmonyEvent, HarmonyReader};

/// Opens a message's header.
pub const START: &str = "<|start|>";
/// Names the header's channel.
pub const CHANNEL: &str = "<|channel|>";
/// Ends the header; the body follows.
pub const MESSAGE: &str = "<|message|>";
/// Names the body's content type (`json`) in a tool call's header.
pub const CONSTRAIN: &str = "<|constrain|>";
/// Ends a message that the reply continues after.
pub const END: &str = "<|end|>";
/// Ends the reply after its final message.
pub const RETURN: &str = "<|return|>";
/// Ends the reply after a tool call.
pub const CALL: &str = "<|call|>";

/// The markers that end a message body.
pub(crate) const BODY_ENDS: [&str; 3] = [END, RETURN, CALL];
