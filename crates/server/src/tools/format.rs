//! [`ToolCallFormat`]: how a model family writes function calls.

use super::call::{random_id, ParsedOutput};
use super::parse;

/// The text formats of function calls that current models write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCallFormat {
    /// `<tool_call>{"name": .., "arguments": {..}}</tool_call>`, one block per call (Hermes,
    /// Qwen2.5, Qwen3).
    Hermes,
    /// A bare JSON object `{"name": .., "parameters": {..}}` (optionally after
    /// `<|python_tag|>`; several separated by `;`), as Llama 3.1+ writes custom tool calls.
    Llama3Json,
    /// `[TOOL_CALLS]` followed by a JSON array of `{"name", "arguments"}` (Mistral v3) or by
    /// `name[ARGS]{..}` (newer Mistral tokenizers).
    Mistral,
    /// gpt-oss's harmony messages to `functions.NAME` on the commentary channel, the JSON
    /// arguments as the body ([`crate::harmony`]). The harmony reasoning splitter reads them
    /// while the reply streams; this reads a whole reply when no splitter ran.
    Harmony,
}

/// A `--tool-call-parser` value that names no format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool-call parser {0:?} (expected one of: hermes, llama3_json, mistral, harmony)")]
pub struct UnknownToolParser(pub String);

impl ToolCallFormat {
    /// The format named as vLLM names its parsers (`hermes`, `llama3_json`, `mistral`).
    pub fn from_name(name: &str) -> Result<Self, UnknownToolParser> {
        match name {
            "hermes" | "qwen" => Ok(ToolCallFormat::Hermes),
            "llama3_json" | "llama3" | "llama" => Ok(ToolCallFormat::Llama3Json),
            "mistral" => Ok(ToolCallFormat::Mistral),
            "harmony" | "openai" | "gpt_oss" => Ok(ToolCallFormat::Harmony),
            other => Err(UnknownToolParser(other.to_string())),
        }
    }

    /// The name [`from_name`](Self::from_name) takes.
    pub fn name(self) -> &'static str {
        match self {
            ToolCallFormat::Hermes => "hermes",
            ToolCallFormat::Llama3Json => "llama3_json",
            ToolCallFormat::Mistral => "mistral",
            ToolCallFormat::Harmony => "harmony",
        }
    }

    /// The format a chat template teaches its model, from the markers it writes; `None` when
    /// the template shows no tool-call format.
    pub fn detect(template: &str) -> Option<Self> {
        if template.contains("to=functions.") && template.contains(crate::harmony::CALL) {
            Some(ToolCallFormat::Harmony)
        } else if template.contains("<tool_call>") {
            Some(ToolCallFormat::Hermes)
        } else if template.contains("[TOOL_CALLS]") {
            Some(ToolCallFormat::Mistral)
        } else if template.contains("<|python_tag|>") || template.contains("ipython") {
            Some(ToolCallFormat::Llama3Json)
        } else {
            None
        }
    }

    /// Whether the markers of this format are special tokens that detokenization must keep.
    pub fn needs_special_tokens(self) -> bool {
        !matches!(self, ToolCallFormat::Hermes)
    }

    /// Splits a whole completion into text and calls. Output that does not hold well-formed
    /// calls is returned as text, so nothing the model wrote is lost.
    pub fn parse(self, text: &str) -> ParsedOutput {
        let parsed = match self {
            ToolCallFormat::Hermes => parse::hermes(text),
            ToolCallFormat::Llama3Json => parse::llama3_json(text),
            ToolCallFormat::Mistral => parse::mistral(text),
            ToolCallFormat::Harmony => parse::harmony(text),
        };
        parsed.unwrap_or_else(|| ParsedOutput::text(text))
    }

    /// Where calls begin, if the format marks them; the text before it is content.
    pub(crate) fn start_marker(self) -> Option<&'static str> {
        match self {
            ToolCallFormat::Hermes => Some("<tool_call>"),
            ToolCallFormat::Mistral => Some("[TOOL_CALLS]"),
            // A harmony reply read without its splitter starts with a header.
            ToolCallFormat::Harmony => Some(crate::harmony::CHANNEL),
            ToolCallFormat::Llama3Json => None,
        }
    }

    /// A fresh call id: Mistral's templates require exactly nine alphanumeric characters,
    /// others take vLLM's `chatcmpl-tool-` ids.
    pub(crate) fn new_call_id(self) -> String {
        match self {
            ToolCallFormat::Mistral => random_id("", 9),
            _ => random_id("chatcmpl-tool-", 32),
        }
    }
}
