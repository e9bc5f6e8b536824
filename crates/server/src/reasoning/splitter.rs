//! [`ReasoningSplitter`]: a reply's text, piece by piece as it streams, split into reasoning
//! and answer. A tag cut across pieces is held back until it is whole (or proves not to be a
//! tag), so both the streamed and the whole reply split the same way.

use super::parser::{ReasoningMode, THINK_CLOSE, THINK_OPEN};

/// A stretch of the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text inside the reasoning block.
    Reasoning(String),
    /// The answer.
    Content(String),
    /// A whole tool call written in the reasoning format's own markup (harmony's messages to
    /// `functions.NAME`): the function's name and its arguments' text.
    ToolCall { name: String, arguments: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing but blanks so far: the reply may still open a block.
    Opening,
    /// Inside the block.
    Reasoning,
    /// After the block (or there is none): the answer.
    Content,
}

/// Splits one reply.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    phase: Phase,
    /// Text not sent yet: a possible tag prefix, or blanks to drop at a block's edge.
    held: String,
    /// Blanks at the start of the current stretch are dropped (after either tag).
    trim_start: bool,
    /// Pieces (tokens) pushed while in reasoning, the closing tag's included.
    reasoning_tokens: usize,
}

impl ReasoningSplitter {
    /// A splitter for a reply starting as `mode` says.
    pub fn new(mode: ReasoningMode) -> Self {
        let phase = match mode.opened_by_prompt {
            true => Phase::Reasoning,
            false => Phase::Opening,
        };
        ReasoningSplitter {
            phase,
            held: String::new(),
            trim_start: mode.opened_by_prompt,
            reasoning_tokens: 0,
        }
    }

    /// The pieces that can be sent once `text` (one token's text) is added.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let was_reasoning = self.phase == Phase::Reasoning;
        self.held.push_str(text);
        let mut out = Vec::new();
        self.advance(&mut out);
        if was_reasoning || self.phase == Phase::Reasoning || out_has_reasoning(&out) {
            self.reasoning_tokens += 1;
        }
        out
    }

    /// What is left at the end of the reply.
    pub fn finish(&mut self) -> Vec<Piece> {
        let held = std::mem::take(&mut self.held);
        let piece = match self.phase {
            Phase::Reasoning => Piece::Reasoning(held),
            Phase::Opening | Phase::Content => Piece::Content(held),
        };
        non_empty(piece).into_iter().collect()
    }

    /// Tokens that belonged to the reasoning block.
    pub fn reasoning_tokens(&self) -> usize {
        self.reasoning_tokens
    }

    fn advance(&mut self, out: &mut Vec<Piece>) {
        loop {
            if self.trim_start {
                let blanks = self.held.len() - self.held.trim_start().len();
                self.held.drain(..blanks);
                if self.held.is_empty() {
                    return;
                }
                self.trim_start = false;
            }
            match self.phase {
                Phase::Opening => {
                    let rest = self.held.trim_start();
                    if let Some(after) = rest.strip_prefix(THINK_OPEN) {
                        self.held = after.to_string();
                        self.phase = Phase::Reasoning;
                        self.trim_start = true;
                    } else if THINK_OPEN.starts_with(rest) {
                        return;
                    } else {
                        self.phase = Phase::Content;
                    }
                }
                Phase::Reasoning => match self.held.find(THINK_CLOSE) {
                    Some(at) => {
                        let after = self.held.split_off(at + THINK_CLOSE.len());
                        self.held.truncate(at);
                        out.extend(non_empty(Piece::Reasoning(std::mem::take(&mut self.held))));
                        self.held = after;
                        self.phase = Phase::Content;
                        self.trim_start = true;
                    }
                    None => {
                        let keep = partial_tag_len(&self.held, THINK_CLOSE);
                        let tail = self.held.split_off(self.held.len() - keep);
                        let sent = std::mem::replace(&mut self.held, tail);
                        out.extend(non_empty(Piece::Reasoning(sent)));
                        return;
                    }
                },
                Phase::Content => {
                    out.extend(non_empty(Piece::Content(std::mem::take(&mut self.held))));
                    return;
                }
            }
        }
    }
}

fn out_has_reasoning(out: &[Piece]) -> bool {
    out.iter().any(|p| matches!(p, Piece::Reasoning(_)))
}

pub(super) fn non_empty(piece: Piece) -> Option<Piece> {
    match &piece {
        Piece::Reasoning(t) | Piece::Content(t) if t.is_empty() => None,
        _ => Some(piece),
    }
}

/// The length of the longest end of `text` that begins `tag` (a tag cut by the piece boundary).
fn partial_tag_len(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: ReasoningMode = ReasoningMode {
        opened_by_prompt: true,
        harmony: false,
    };
    const CLOSED: ReasoningMode = ReasoningMode {
        opened_by_prompt: false,
        harmony: false,
    };

    /// The reply's reasoning and answer, pushed in `pieces`.
    fn split(mode: ReasoningMode, pieces: &[&str]) -> (String, String) {
        let mut s = ReasoningSplitter::new(mode);
        let mut all: Vec<Piece> = pieces.iter().flat_map(|p| s.push(p)).collect();
        all.extend(s.finish());
        let (mut reasoning, mut content) = (String::new(), String::new());
        for p in all {
            match p {
                Piece::Reasoning(t) => reasoning.push_str(&t),
                Piece::Content(t) => content.push_str(&t),
                Piece::ToolCall { .. } => unreachable!("think tags carry no calls"),
            }
        }
        (reasoning, content)
    }

    /// Every way of cutting `text` into two pieces, and one piece per character.
    fn cuts(text: &str) -> Vec<Vec<String>> {
        let mut all: Vec<Vec<String>> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .map(|i| vec![text[..i].to_string(), text[i..].to_string()])
            .collect();
        all.push(text.chars().map(String::from).collect());
        all
    }

    #[test]
    fn a_reply_that_opens_a_block_splits_at_the_closing_tag_however_it_is_cut() {
        let text = "<think>\nthe user wants a greeting\n</think>\n\nHello there!";
        for pieces in cuts(text) {
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            assert_eq!(
                split(CLOSED, &pieces),
                ("the user wants a greeting\n".into(), "Hello there!".into()),
                "{pieces:?}"
            );
        }
    }

    #[test]
    fn a_prompt_that_opened_the_block_makes_the_reply_start_as_reasoning() {
        let text = "weigh it\n</think>\n\nYes.";
        for pieces in cuts(text) {
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            assert_eq!(split(OPEN, &pieces), ("weigh it\n".into(), "Yes.".into()));
        }
    }

    #[test]
    fn text_from_a_model_that_does_not_think_is_all_answer() {
        for text in [
            "Hello <think> there",
            " <thin",
            "",
            "  hi",
            "</think> x",
            "<",
        ] {
            for pieces in cuts(text) {
                let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
                assert_eq!(split(CLOSED, &pieces), (String::new(), text.to_string()));
            }
        }
    }

    #[test]
    fn an_unclosed_block_is_all_reasoning_and_a_cut_tag_is_kept_as_text() {
        assert_eq!(
            split(CLOSED, &["<think>", "a", "</thi"]),
            ("a</thi".into(), String::new())
        );
        assert_eq!(split(OPEN, &["ab"]), ("ab".into(), String::new()));
    }

    #[test]
    fn reasoning_tokens_count_the_block_and_its_closing_tag() {
        let mut s = ReasoningSplitter::new(CLOSED);
        for t in ["<think>", "a", "b", "</think>", "\n\n", "Hi", "!"] {
            s.push(t);
        }
        assert_eq!(s.reasoning_tokens(), 4);
        let mut s = ReasoningSplitter::new(CLOSED);
        for t in ["Hi", "!"] {
            s.push(t);
        }
        assert_eq!(s.reasoning_tokens(), 0);
    }
}
