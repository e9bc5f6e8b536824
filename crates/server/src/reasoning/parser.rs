//! [`ReasoningParser`]: how a model marks its reasoning, chosen by `--reasoning-parser` or read
//! off the chat template; and [`ReasoningMode`], where one request's reply starts.

use kestrel_model::tokenizer::Tokenizer;

/// The reasoning formats of current thinking models. The first two mark reasoning with
/// `<think>` and `</think>`; they differ in who writes the opening tag, which [`ReasoningMode`]
/// reads off each prompt, so either name parses either family's output. Harmony (gpt-oss)
/// writes its reasoning as messages on the `analysis` channel ([`crate::harmony`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningParser {
    /// DeepSeek-R1 (and its distillations): the template opens `<think>` in the prompt.
    DeepSeekR1,
    /// Qwen3 (and QwQ): the model writes `<think>` itself; `enable_thinking: false` makes the
    /// template write an empty block.
    Qwen3,
    /// gpt-oss's harmony messages: `analysis` is reasoning, `final` the answer (and messages
    /// to `functions.NAME` tool calls).
    Harmony,
}

/// A `--reasoning-parser` value that names no parser.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reasoning parser {0:?} (expected one of: deepseek_r1, qwen3, harmony, none)")]
pub struct UnknownReasoningParser(pub String);

/// Where one request's reply starts: inside reasoning (the prompt opened the block) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasoningMode {
    /// The prompt ends inside an open `<think>`: the reply starts as reasoning.
    pub opened_by_prompt: bool,
    /// The reply is harmony messages (its markers are special tokens, kept in its text).
    pub harmony: bool,
}

/// The opening tag.
pub const THINK_OPEN: &str = "<think>";
/// The closing tag.
pub const THINK_CLOSE: &str = "</think>";

use crate::harmony::{CHANNEL as HARMONY_CHANNEL, MESSAGE as HARMONY_MESSAGE};

/// Prompt tokens read back to see whether the prompt ends inside an open block.
const PROMPT_TAIL_TOKENS: usize = 16;

impl ReasoningParser {
    /// The parser named as vLLM names it; `Ok(None)` for `none` (no parsing, not even the
    /// template's).
    pub fn from_name(name: &str) -> Result<Option<Self>, UnknownReasoningParser> {
        match name {
            "deepseek_r1" | "deepseek-r1" => Ok(Some(ReasoningParser::DeepSeekR1)),
            "qwen3" | "qwq" => Ok(Some(ReasoningParser::Qwen3)),
            "harmony" | "openai_gptoss" | "gpt_oss" => Ok(Some(ReasoningParser::Harmony)),
            "none" => Ok(None),
            other => Err(UnknownReasoningParser(other.to_string())),
        }
    }

    /// The name [`from_name`](Self::from_name) takes.
    pub fn name(self) -> &'static str {
        match self {
            ReasoningParser::DeepSeekR1 => "deepseek_r1",
            ReasoningParser::Qwen3 => "qwen3",
            ReasoningParser::Harmony => "harmony",
        }
    }

    /// The parser a chat template shows: one that writes harmony's channel and message markers
    /// is harmony; one that writes both tags teaches its model to think.
    pub fn detect(template: &str) -> Option<Self> {
        if template.contains(HARMONY_CHANNEL) && template.contains(HARMONY_MESSAGE) {
            return Some(ReasoningParser::Harmony);
        }
        if !(template.contains(THINK_OPEN) && template.contains(THINK_CLOSE)) {
            return None;
        }
        if template.contains("<｜Assistant｜>") {
            Some(ReasoningParser::DeepSeekR1)
        } else {
            Some(ReasoningParser::Qwen3)
        }
    }

    /// Where a reply to `prompt_ids` starts: inside reasoning when the prompt ends with an open
    /// tag (the generation prompt the template wrote after the last message; a tag inside a
    /// message is followed by the template's turn markup, so it cannot end the prompt).
    pub fn mode(self, tokenizer: &Tokenizer, prompt_ids: &[u32]) -> ReasoningMode {
        if self == ReasoningParser::Harmony {
            return ReasoningMode {
                opened_by_prompt: false,
                harmony: true,
            };
        }
        let tail = &prompt_ids[prompt_ids.len().saturating_sub(PROMPT_TAIL_TOKENS)..];
        let text = tokenizer.decode(tail, false);
        ReasoningMode {
            opened_by_prompt: ends_inside_block(&text),
            harmony: false,
        }
    }
}

/// Whether `text` ends with an opening tag (and blanks).
fn ends_inside_block(text: &str) -> bool {
    text.trim_end().ends_with(THINK_OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_none_turns_parsing_off() {
        for p in [
            ReasoningParser::DeepSeekR1,
            ReasoningParser::Qwen3,
            ReasoningParser::Harmony,
        ] {
            assert_eq!(ReasoningParser::from_name(p.name()), Ok(Some(p)));
        }
        assert_eq!(ReasoningParser::from_name("none"), Ok(None));
        assert!(ReasoningParser::from_name("granite").is_err());
    }

    #[test]
    fn templates_that_write_both_tags_think() {
        let qwen3 = "{% if enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}";
        assert_eq!(ReasoningParser::detect(qwen3), Some(ReasoningParser::Qwen3));
        let r1 = "<｜Assistant｜><think>\n{{ x | replace('</think>', '') }}";
        assert_eq!(
            ReasoningParser::detect(r1),
            Some(ReasoningParser::DeepSeekR1)
        );
        assert_eq!(ReasoningParser::detect("<|im_start|>assistant\n"), None);
        assert_eq!(ReasoningParser::detect("<think> only"), None);
        let harmony = "<|start|>assistant<|channel|>analysis<|message|>{{ thinking }}<|end|>";
        assert_eq!(
            ReasoningParser::detect(harmony),
            Some(ReasoningParser::Harmony)
        );
    }

    #[test]
    fn a_prompt_is_inside_a_block_only_after_an_unclosed_open_tag() {
        assert!(ends_inside_block("<|im_start|>assistant\n<think>\n"));
        assert!(!ends_inside_block("assistant\n<think>\n\n</think>\n\n"));
        assert!(!ends_inside_block("<|im_start|>assistant\n"));
        assert!(!ends_inside_block(
            "say <think><|im_end|>\n<|im_start|>assistant\n"
        ));
        assert!(ends_inside_block("<｜Assistant｜><think>\n"));
    }
}
