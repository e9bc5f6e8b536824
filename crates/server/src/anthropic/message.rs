//! [`MessageContext`]: what a reply's message shares whole or streamed (id, model, how the
//! reply is read), and the whole message of a collected reply ([`MessageContext::message`]):
//! its content blocks read by [`Reply::read`] (thinking, text, tool_use — as chat completions
//! split them), its `stop_reason`, `stop_sequence` and usage.

use kestrel_engine::api::{TokenEvent, Usage};
use kestrel_engine::request::FinishReason;
use serde_json::Value;

use super::stop::StopSequences;
use super::wire::{MessageResponse, MessageUsage, OutputBlock};
use crate::reasoning::ReasoningMode;
use crate::reply_reader::Reply;
use crate::submitted_choices::ChoiceOutput;
use crate::tools::ToolCall;
use crate::validation::chat_tools::ToolMode;
use crate::validation::ValidRequest;

/// What every form of one reply shares.
#[derive(Debug, Clone)]
pub struct MessageContext {
    /// `msg_<hex>`.
    pub id: String,
    pub model: String,
    /// The request's stop sequences.
    pub stops: Vec<String>,
    /// Where the reply starts when its reasoning is split out; `None`: not split.
    pub reasoning: Option<ReasoningMode>,
    /// How the reply is read for tool calls; `None`: plain text.
    pub tools: Option<ToolMode>,
    /// Prompt tokens (all of them; the cached share is known when the reply ends).
    pub prompt_tokens: usize,
}

impl MessageContext {
    /// The context of `valid`'s reply, answered as `model`.
    pub fn new(valid: &ValidRequest, model: String) -> Self {
        let stops = valid
            .prompts
            .first()
            .map(|p| p.request.sampling().stop.clone())
            .unwrap_or_default();
        MessageContext {
            id: format!("msg_{}", crate::response_id::random_hex128()),
            model,
            stops,
            reasoning: valid.reasoning,
            tools: valid.tools.clone(),
            prompt_tokens: valid.prompt_tokens(),
        }
    }

    /// The message of a collected reply.
    pub fn message(&self, output: &ChoiceOutput) -> MessageResponse {
        let mut stop = StopSequences::new(&self.stops);
        let (tokens, tail) = without_stop(&mut stop, &output.tokens, &output.text);
        let reply = Reply::read(self.reasoning, self.tools.as_ref(), &tokens, &tail);
        let mut content = Vec::new();
        if let Some(thinking) = reply.reasoning {
            content.push(OutputBlock::Thinking {
                thinking,
                signature: String::new(),
            });
        }
        if let Some(text) = reply.content.filter(|t| !t.is_empty()) {
            content.push(OutputBlock::Text { text });
        }
        let calls = !reply.calls.is_empty();
        content.extend(reply.calls.into_iter().map(tool_use));
        MessageResponse {
            content,
            stop_reason: Some(stop_reason(output.reason, calls, stop.matched())),
            stop_sequence: stop.matched().map(str::to_string),
            usage: usage(output.usage),
            ..self.start()
        }
    }

    /// The message as `message_start` shows it: no content, no stop reason, the whole prompt
    /// as input.
    pub fn start(&self) -> MessageResponse {
        MessageResponse {
            id: self.id.clone(),
            kind: "message",
            role: "assistant",
            model: self.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: MessageUsage {
                input_tokens: self.prompt_tokens,
                ..MessageUsage::default()
            },
        }
    }
}

/// A finished reply's token texts and tail (the rest of `text`) with the stop string cut off
/// the last piece that carries text.
fn without_stop(
    stop: &mut StopSequences,
    tokens: &[TokenEvent],
    text: &str,
) -> (Vec<TokenEvent>, String) {
    let carried: usize = tokens.iter().map(|t| t.text.len()).sum();
    let tail = text.get(carried..).unwrap_or_default();
    let mut tokens = tokens.to_vec();
    if !tail.is_empty() {
        return (tokens, stop.cut(tail).to_string());
    }
    if let Some(last) = tokens.iter_mut().rev().find(|t| !t.text.is_empty()) {
        last.text = stop.cut(&last.text).to_string();
    }
    (tokens, String::new())
}

/// Anthropic's `stop_reason`.
pub fn stop_reason(reason: FinishReason, calls: bool, stop: Option<&str>) -> &'static str {
    match (reason, calls, stop) {
        (FinishReason::Length, _, _) => "max_tokens",
        (_, _, Some(_)) => "stop_sequence",
        (_, true, _) => "tool_use",
        _ => "end_turn",
    }
}

/// Usage in Anthropic's terms: cached prompt tokens are not input tokens.
pub fn usage(u: Usage) -> MessageUsage {
    MessageUsage {
        input_tokens: u.prompt_tokens.saturating_sub(u.cached_tokens),
        output_tokens: u.completion_tokens,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: u.cached_tokens,
    }
}

/// A call as a `tool_use` block: a `toolu_` id, the arguments as an object.
pub fn tool_use(call: ToolCall) -> OutputBlock {
    let input = serde_json::from_str(&call.arguments).unwrap_or(Value::String(call.arguments));
    OutputBlock::ToolUse {
        id: format!("toolu_{}", &crate::response_id::random_hex128()[..24]),
        name: call.name,
        input,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> TokenEvent {
        TokenEvent {
            id: 1,
            text: text.to_string(),
            logprobs: None,
        }
    }

    #[test]
    fn the_stop_string_is_cut_from_the_last_piece_with_text() {
        let mut stop = StopSequences::new(&["##".into()]);
        let tokens = [token("a "), token("b##"), token("")];
        let (tokens, tail) = without_stop(&mut stop, &tokens, "a b##");
        assert_eq!(tokens[1].text, "b");
        assert_eq!((tail.as_str(), stop.matched()), ("", Some("##")));
        let mut stop = StopSequences::new(&["##".into()]);
        let (_, tail) = without_stop(&mut stop, &[token("a")], "a ##");
        assert_eq!((tail.as_str(), stop.matched()), (" ", Some("##")));
    }

    #[test]
    fn stop_reasons_and_usage_follow_anthropic() {
        assert_eq!(stop_reason(FinishReason::Length, true, None), "max_tokens");
        assert_eq!(
            stop_reason(FinishReason::Stop, false, Some("x")),
            "stop_sequence"
        );
        assert_eq!(stop_reason(FinishReason::Stop, true, None), "tool_use");
        assert_eq!(stop_reason(FinishReason::Stop, false, None), "end_turn");
        let u = usage(Usage {
            prompt_tokens: 10,
            completion_tokens: 3,
            cached_tokens: 4,
        });
        assert_eq!(
            (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
            (6, 4, 3)
        );
    }
}
