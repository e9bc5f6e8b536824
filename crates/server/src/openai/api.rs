//! What differs between the two OpenAI generation routes: the [`OpenAiApi`] trait says how a
//! route builds its response (non-streaming) and its chunks (streaming); [`Completions`]
//! (`/v1/completions`, `text_completion`) and [`Chat`] (`/v1/chat/completions`,
//! `chat.completion` / `chat.completion.chunk`) implement it. Everything else — validation,
//! submission, collection, usage, logging, SSE framing — is shared ([`super::routes`]`::handle`,
//! [`crate::openai::stream::OpenAiEncoder`]).

use axum::http::StatusCode;
use axum::response::Response;
use kestrel_engine::api::{TokenEvent, Usage};
use kestrel_engine::request::FinishReason;

use crate::error::json_response;
use crate::openai::logprobs;
use crate::openai::tool_reply;
use crate::openai::wire::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatLogprobs, ChatMessageOut, CompletionChoice,
    CompletionRequest, CompletionResponse, PromptLogprobs, UsageInfo,
};
use crate::reasoning::ReasoningMode;
use crate::reply_reader::{Reply, ReplyEvent, ReplyReader};
use crate::sse::json;
use crate::state::AppState;
use crate::submitted_choices::ChoiceOutput;
use crate::usage::{usage_info, usage_info_with_reasoning};
use crate::validation::chat_tools::ToolMode;
use crate::validation::{ValidRequest, Validate};
use crate::wire::tools::ToolCallDelta;

/// What every response and chunk of one request shares.
pub struct OpenAiContext {
    pub state: AppState,
    /// `cmpl-<random hex>` or `chatcmpl-<random hex>`.
    pub id: String,
    /// `fp_kestrel_<hash>` (see [`crate::response_id::system_fingerprint`]).
    pub system_fingerprint: String,
    /// Per choice index: the prompt text a streamed completion choice starts with (`echo`).
    pub echo: Vec<Option<String>>,
    pub created: u64,
    pub model: String,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Logprobs were requested.
    pub logprobs: bool,
    /// How chat replies are read for tool calls; `None`: plain text.
    pub tools: Option<ToolMode>,
    /// Per prompt, its `prompt_logprobs` when the request asked for them (choice `i` belongs
    /// to prompt `i / n`).
    pub prompt_logprobs: Vec<PromptLogprobs>,
    /// Choices per prompt.
    pub n: usize,
    /// Where chat replies start when their reasoning is split out; `None`: not split.
    pub reasoning: Option<ReasoningMode>,
}

impl OpenAiContext {
    /// The `prompt_logprobs` of choice `index`'s prompt, if asked for.
    fn prompt_logprobs_of(&self, index: usize) -> Option<PromptLogprobs> {
        self.prompt_logprobs.get(index / self.n.max(1)).cloned()
    }
}

/// How one OpenAI route shapes its output.
pub trait OpenAiApi: Send + 'static {
    /// The wire request.
    type Request: Validate<Valid = ValidRequest>;
    /// What a stream remembers per choice.
    type ChoiceState: Default + Send + 'static;
    /// The route template (for the request log).
    const ROUTE: &'static str;
    /// Prefix of response ids.
    const ID_PREFIX: &'static str;

    /// The non-streaming response.
    fn response(cx: &OpenAiContext, outputs: Vec<ChoiceOutput>, usage: Usage) -> Response;
    /// Chunks for a token of choice `index`.
    fn token(
        cx: &OpenAiContext,
        choice: &mut Self::ChoiceState,
        index: usize,
        token: TokenEvent,
        out: &mut Vec<String>,
    );
    /// Chunks for the end of choice `index` (`text` is the withheld tail).
    fn finished(
        cx: &OpenAiContext,
        choice: &mut Self::ChoiceState,
        index: usize,
        reason: FinishReason,
        text: String,
        out: &mut Vec<String>,
    );
    /// Reasoning tokens of a streamed choice so far (0 where replies are not split).
    fn reasoning_tokens(choice: &Self::ChoiceState) -> usize {
        let _ = choice;
        0
    }
    /// The final usage chunk (`stream_options.include_usage`), with the choices' reasoning
    /// tokens.
    fn usage_chunk(cx: &OpenAiContext, usage: Usage, reasoning_tokens: usize) -> String;
}

/// `POST /v1/completions`.
pub enum Completions {}

/// Per-choice stream state of completions: the text offset for logprobs, and whether the
/// echoed prompt went out.
#[derive(Debug, Default)]
pub struct TextOffset {
    offset: usize,
    echoed: bool,
}

impl TextOffset {
    /// `text` preceded, the first time, by the choice's echoed prompt.
    fn with_echo(&mut self, cx: &OpenAiContext, index: usize, text: String) -> String {
        if std::mem::replace(&mut self.echoed, true) {
            return text;
        }
        match cx.echo.get(index) {
            Some(Some(prompt)) => format!("{prompt}{text}"),
            _ => text,
        }
    }
}

fn completion_chunk(
    cx: &OpenAiContext,
    choices: Vec<CompletionChoice>,
    usage: Option<UsageInfo>,
) -> CompletionResponse {
    CompletionResponse {
        id: cx.id.clone(),
        object: "text_completion",
        created: cx.created,
        model: cx.model.clone(),
        choices,
        usage,
        system_fingerprint: cx.system_fingerprint.clone(),
    }
}

impl OpenAiApi for Completions {
    type Request = CompletionRequest;
    type ChoiceState = TextOffset;
    const ROUTE: &'static str = "/v1/completions";
    const ID_PREFIX: &'static str = "cmpl";

    fn response(cx: &OpenAiContext, outputs: Vec<ChoiceOutput>, usage: Usage) -> Response {
        let choices = outputs
            .into_iter()
            .enumerate()
            .map(|(index, o)| CompletionChoice {
                index,
                logprobs: cx
                    .logprobs
                    .then(|| logprobs::completion(cx.state.tokenizer(), &o.tokens, &mut 0)),
                text: o.text,
                finish_reason: Some(o.reason.as_str().to_string()),
                prompt_logprobs: cx.prompt_logprobs_of(index),
            })
            .collect();
        let body = completion_chunk(cx, choices, Some(usage_info(usage)));
        json_response(StatusCode::OK, &body)
    }

    fn token(
        cx: &OpenAiContext,
        offset: &mut TextOffset,
        index: usize,
        t: TokenEvent,
        out: &mut Vec<String>,
    ) {
        let text = offset.with_echo(cx, index, t.text.clone());
        if text.is_empty() && !cx.logprobs {
            return;
        }
        let lp = cx.logprobs.then(|| {
            logprobs::completion(
                cx.state.tokenizer(),
                std::slice::from_ref(&t),
                &mut offset.offset,
            )
        });
        let choice = CompletionChoice {
            index,
            text,
            logprobs: lp,
            finish_reason: None,
            prompt_logprobs: None,
        };
        out.push(json(&completion_chunk(cx, vec![choice], None)));
    }

    fn finished(
        cx: &OpenAiContext,
        offset: &mut TextOffset,
        index: usize,
        reason: FinishReason,
        text: String,
        out: &mut Vec<String>,
    ) {
        let choice = CompletionChoice {
            index,
            text: offset.with_echo(cx, index, text),
            logprobs: None,
            finish_reason: Some(reason.as_str().to_string()),
            prompt_logprobs: None,
        };
        out.push(json(&completion_chunk(cx, vec![choice], None)));
    }

    fn usage_chunk(cx: &OpenAiContext, usage: Usage, _reasoning_tokens: usize) -> String {
        json(&completion_chunk(cx, Vec::new(), Some(usage_info(usage))))
    }
}

/// `POST /v1/chat/completions`.
pub enum Chat {}

/// Per-choice stream state of chat: whether the opening (role) chunk went out, and the reply
/// reader when the reply is read for reasoning or tool calls (else tokens go out as they come,
/// with their logprobs).
#[derive(Debug, Default)]
pub struct ChatStreamState {
    opened: bool,
    reader: Option<ReplyReader>,
    /// Calls sent so far.
    calls: usize,
}

fn chat_chunk(
    cx: &OpenAiContext,
    choices: Vec<ChatChunkChoice>,
    usage: Option<UsageInfo>,
) -> String {
    json(&ChatCompletionChunk {
        id: cx.id.clone(),
        object: "chat.completion.chunk",
        created: cx.created,
        model: cx.model.clone(),
        choices,
        usage: cx.include_usage.then_some(usage),
        system_fingerprint: cx.system_fingerprint.clone(),
    })
}

fn delta_chunk(
    cx: &OpenAiContext,
    index: usize,
    delta: ChatDelta,
    logprobs: Option<ChatLogprobs>,
    finish_reason: Option<String>,
) -> String {
    let choice = ChatChunkChoice {
        index,
        delta,
        logprobs,
        finish_reason,
    };
    chat_chunk(cx, vec![choice], None)
}

/// The opening chunk of choice `index` (role only), once.
fn open(cx: &OpenAiContext, state: &mut ChatStreamState, index: usize, out: &mut Vec<String>) {
    if std::mem::replace(&mut state.opened, true) {
        return;
    }
    if cx.tools.is_some() || cx.reasoning.is_some() {
        state.reader = Some(ReplyReader::new(cx.reasoning, cx.tools.as_ref()));
    }
    let delta = ChatDelta {
        role: Some("assistant"),
        content: Some(String::new()),
        ..ChatDelta::default()
    };
    out.push(delta_chunk(cx, index, delta, None, None));
}

/// Chunks for what a read reply can send: reasoning and content deltas, and each call whole.
fn send_events(
    cx: &OpenAiContext,
    index: usize,
    events: Vec<ReplyEvent>,
    calls: &mut usize,
    out: &mut Vec<String>,
) {
    for event in events {
        let delta = match event {
            ReplyEvent::Reasoning(text) => ChatDelta {
                reasoning_content: Some(text.clone()),
                reasoning: Some(text),
                ..ChatDelta::default()
            },
            ReplyEvent::Content(text) => ChatDelta {
                content: Some(text),
                ..ChatDelta::default()
            },
            ReplyEvent::Call { index: i, call } => {
                *calls += 1;
                ChatDelta {
                    tool_calls: vec![ToolCallDelta {
                        index: i,
                        call: call.into(),
                    }],
                    ..ChatDelta::default()
                }
            }
        };
        out.push(delta_chunk(cx, index, delta, None, None));
    }
}

impl OpenAiApi for Chat {
    type Request = ChatCompletionRequest;
    type ChoiceState = ChatStreamState;
    const ROUTE: &'static str = "/v1/chat/completions";
    const ID_PREFIX: &'static str = "chatcmpl";

    fn response(cx: &OpenAiContext, outputs: Vec<ChoiceOutput>, usage: Usage) -> Response {
        let mut reasoning_tokens = 0;
        let choices = outputs
            .into_iter()
            .enumerate()
            .map(|(index, o)| {
                let tail = o.text.get(token_text_len(&o.tokens)..).unwrap_or_default();
                let reply = Reply::read(cx.reasoning, cx.tools.as_ref(), &o.tokens, tail);
                reasoning_tokens += reply.reasoning_tokens;
                ChatChoice {
                    index,
                    logprobs: cx
                        .logprobs
                        .then(|| logprobs::chat(cx.state.tokenizer(), &o.tokens)),
                    finish_reason: tool_reply::finish_reason(o.reason, !reply.calls.is_empty()),
                    message: ChatMessageOut {
                        role: "assistant",
                        content: reply.content,
                        reasoning_content: reply.reasoning.clone(),
                        reasoning: reply.reasoning,
                        tool_calls: reply.calls.into_iter().map(Into::into).collect(),
                    },
                }
            })
            .collect();
        let body = ChatCompletionResponse {
            id: cx.id.clone(),
            object: "chat.completion",
            created: cx.created,
            model: cx.model.clone(),
            choices,
            usage: usage_info_with_reasoning(usage, cx.reasoning.map(|_| reasoning_tokens)),
            system_fingerprint: cx.system_fingerprint.clone(),
            prompt_logprobs: cx.prompt_logprobs_of(0),
        };
        json_response(StatusCode::OK, &body)
    }

    fn token(
        cx: &OpenAiContext,
        state: &mut ChatStreamState,
        index: usize,
        t: TokenEvent,
        out: &mut Vec<String>,
    ) {
        open(cx, state, index, out);
        if let Some(reader) = &mut state.reader {
            let events = reader.push(&t.text);
            send_events(cx, index, events, &mut state.calls, out);
            return;
        }
        if t.text.is_empty() && !cx.logprobs {
            return;
        }
        let lp = cx
            .logprobs
            .then(|| logprobs::chat(cx.state.tokenizer(), std::slice::from_ref(&t)));
        let delta = ChatDelta {
            content: Some(t.text),
            ..ChatDelta::default()
        };
        out.push(delta_chunk(cx, index, delta, lp, None));
    }

    fn finished(
        cx: &OpenAiContext,
        state: &mut ChatStreamState,
        index: usize,
        reason: FinishReason,
        text: String,
        out: &mut Vec<String>,
    ) {
        open(cx, state, index, out);
        match &mut state.reader {
            Some(reader) => {
                let mut events = reader.push(&text);
                events.extend(reader.finish());
                send_events(cx, index, events, &mut state.calls, out);
            }
            None if !text.is_empty() => {
                let delta = ChatDelta {
                    content: Some(text),
                    ..ChatDelta::default()
                };
                out.push(delta_chunk(cx, index, delta, None, None));
            }
            None => {}
        }
        let reason = Some(tool_reply::finish_reason(reason, state.calls > 0));
        out.push(delta_chunk(cx, index, ChatDelta::default(), None, reason));
    }

    fn reasoning_tokens(state: &ChatStreamState) -> usize {
        state
            .reader
            .as_ref()
            .map_or(0, ReplyReader::reasoning_tokens)
    }

    fn usage_chunk(cx: &OpenAiContext, usage: Usage, reasoning_tokens: usize) -> String {
        let usage = usage_info_with_reasoning(usage, cx.reasoning.map(|_| reasoning_tokens));
        chat_chunk(cx, Vec::new(), Some(usage))
    }
}

/// Bytes of text the tokens carry (the rest of a finished choice's text is the withheld tail).
fn token_text_len(tokens: &[TokenEvent]) -> usize {
    tokens.iter().map(|t| t.text.len()).sum()
}
