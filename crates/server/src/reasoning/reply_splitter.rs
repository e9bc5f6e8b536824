//! [`ReplySplitter`]: the splitter of a reply's reasoning format — `<think>` tags
//! ([`ReasoningSplitter`]) or harmony messages ([`HarmonyReader`]) — behind one interface.

use super::parser::ReasoningMode;
use super::splitter::{Piece, ReasoningSplitter};
use crate::harmony::{HarmonyEvent, HarmonyReader};

/// Splits one reply into reasoning, answer and (harmony) tool calls.
#[derive(Debug, Clone)]
pub enum ReplySplitter {
    Think(ReasoningSplitter),
    Harmony(HarmonyReader),
}

impl ReplySplitter {
    /// The splitter for a reply starting as `mode` says.
    pub fn new(mode: ReasoningMode) -> Self {
        match mode.harmony {
            true => ReplySplitter::Harmony(HarmonyReader::default()),
            false => ReplySplitter::Think(ReasoningSplitter::new(mode)),
        }
    }

    /// The pieces that can be sent once `text` (one token's text) is added.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        match self {
            ReplySplitter::Think(s) => s.push(text),
            ReplySplitter::Harmony(r) => r.push(text).into_iter().map(Piece::from).collect(),
        }
    }

    /// What is left at the end of the reply.
    pub fn finish(&mut self) -> Vec<Piece> {
        match self {
            ReplySplitter::Think(s) => s.finish(),
            ReplySplitter::Harmony(r) => r.finish().into_iter().map(Piece::from).collect(),
        }
    }

    /// Tokens that belonged to reasoning.
    pub fn reasoning_tokens(&self) -> usize {
        match self {
            ReplySplitter::Think(s) => s.reasoning_tokens(),
            ReplySplitter::Harmony(r) => r.reasoning_tokens(),
        }
    }
}

impl From<HarmonyEvent> for Piece {
    fn from(e: HarmonyEvent) -> Self {
        match e {
            HarmonyEvent::Reasoning(t) => Piece::Reasoning(t),
            HarmonyEvent::Content(t) => Piece::Content(t),
            HarmonyEvent::Call { name, arguments } => Piece::ToolCall { name, arguments },
        }
    }
}
