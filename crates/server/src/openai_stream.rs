//! SSE encoders for the OpenAI routes: `text_completion` chunks and `chat.completion.chunk`s,
//! then an optional usage chunk (`stream_options.include_usage`) and `data: [DONE]`.

use kestrel_engine::api::{EngineEvent, Usage};

use crate::error::ApiError;
use crate::logprobs;
use crate::request_log::Tally;
use crate::sse::{json, SseEncoder};
use crate::state::AppState;
use crate::wire::openai::{
    ChatChunkChoice, ChatCompletionChunk, ChatDelta, CompletionChoice, CompletionResponse,
    PromptTokensDetails, UsageInfo,
};

/// What every chunk of one response shares.
#[derive(Debug, Clone)]
pub struct ChunkMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// Usage on the wire.
pub fn usage_info(u: Usage) -> UsageInfo {
    UsageInfo {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: u.cached_tokens,
        },
    }
}

/// State shared by both encoders: usage totals, the tally and error handling.
struct Common {
    state: AppState,
    meta: ChunkMeta,
    include_usage: bool,
    usage: Usage,
    tally: Tally,
}

impl Common {
    fn new(state: AppState, meta: ChunkMeta, include_usage: bool, tally: Tally) -> Common {
        let usage = Usage {
            prompt_tokens: tally.prompt_tokens(),
            ..Usage::default()
        };
        Common {
            state,
            meta,
            include_usage,
            usage,
            tally,
        }
    }

    fn finished(&mut self, usage: &Usage) {
        self.usage.completion_tokens += usage.completion_tokens;
        self.usage.cached_tokens = self.usage.cached_tokens.max(usage.cached_tokens);
    }

    fn error_payload(failure: &kestrel_engine::api::EngineFailure) -> String {
        json(&ApiError::from(failure.clone()).openai_body())
    }
}

/// Encodes `/v1/completions` streams.
pub struct CompletionEncoder {
    common: Common,
    offsets: Vec<usize>,
    logprobs: bool,
}

impl CompletionEncoder {
    /// An encoder for `n` choices.
    pub fn new(
        state: AppState,
        meta: ChunkMeta,
        include_usage: bool,
        tally: Tally,
        n: usize,
        logprobs: bool,
    ) -> Self {
        CompletionEncoder {
            common: Common::new(state, meta, include_usage, tally),
            offsets: vec![0; n],
            logprobs,
        }
    }

    fn chunk(&self, choice: CompletionChoice, usage: Option<UsageInfo>) -> String {
        let m = &self.common.meta;
        json(&CompletionResponse {
            id: m.id.clone(),
            object: "text_completion",
            created: m.created,
            model: m.model.clone(),
            choices: vec![choice],
            usage,
        })
    }
}

impl SseEncoder for CompletionEncoder {
    fn event(&mut self, index: usize, event: EngineEvent) -> Vec<String> {
        self.common.tally.observe(&event);
        match event {
            EngineEvent::Token(t) => {
                if t.text.is_empty() && !self.logprobs {
                    return Vec::new();
                }
                let lp = self.logprobs.then(|| {
                    let offset = &mut self.offsets[index];
                    logprobs::completion(
                        self.common.state.tokenizer(),
                        std::slice::from_ref(&t),
                        offset,
                    )
                });
                vec![self.chunk(
                    CompletionChoice {
                        index,
                        text: t.text,
                        logprobs: lp,
                        finish_reason: None,
                    },
                    None,
                )]
            }
            EngineEvent::Finished {
                reason,
                text,
                usage,
                ..
            } => {
                self.common.finished(&usage);
                vec![self.chunk(
                    CompletionChoice {
                        index,
                        text,
                        logprobs: None,
                        finish_reason: Some(reason.as_str().to_string()),
                    },
                    None,
                )]
            }
            EngineEvent::Failed(f) => vec![Common::error_payload(&f)],
        }
    }

    fn end(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if self.common.include_usage && self.common.tally.done() {
            let m = &self.common.meta;
            out.push(json(&CompletionResponse {
                id: m.id.clone(),
                object: "text_completion",
                created: m.created,
                model: m.model.clone(),
                choices: Vec::new(),
                usage: Some(usage_info(self.common.usage)),
            }));
        }
        out.push("[DONE]".to_string());
        out
    }
}

/// Encodes `/v1/chat/completions` streams.
pub struct ChatEncoder {
    common: Common,
    started: Vec<bool>,
    logprobs: bool,
}

impl ChatEncoder {
    /// An encoder for `n` choices.
    pub fn new(
        state: AppState,
        meta: ChunkMeta,
        include_usage: bool,
        tally: Tally,
        n: usize,
        logprobs: bool,
    ) -> Self {
        ChatEncoder {
            common: Common::new(state, meta, include_usage, tally),
            started: vec![false; n],
            logprobs,
        }
    }

    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<UsageInfo>) -> String {
        let m = &self.common.meta;
        json(&ChatCompletionChunk {
            id: m.id.clone(),
            object: "chat.completion.chunk",
            created: m.created,
            model: m.model.clone(),
            choices,
            usage: self.common.include_usage.then_some(usage),
        })
    }

    fn delta(&self, index: usize, content: String, finish: Option<String>) -> String {
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content: (finish.is_none() || !content.is_empty()).then_some(content),
            },
            logprobs: None,
            finish_reason: finish,
        };
        self.chunk(vec![choice], None)
    }

    /// The opening chunk of choice `index` (role only), once.
    fn open(&mut self, index: usize, out: &mut Vec<String>) {
        if std::mem::replace(&mut self.started[index], true) {
            return;
        }
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: Some("assistant"),
                content: Some(String::new()),
            },
            logprobs: None,
            finish_reason: None,
        };
        out.push(self.chunk(vec![choice], None));
    }
}

impl SseEncoder for ChatEncoder {
    fn event(&mut self, index: usize, event: EngineEvent) -> Vec<String> {
        self.common.tally.observe(&event);
        let mut out = Vec::new();
        if !matches!(event, EngineEvent::Failed(_)) {
            self.open(index, &mut out);
        }
        match event {
            EngineEvent::Token(t) => {
                if !t.text.is_empty() || self.logprobs {
                    let lp = self.logprobs.then(|| {
                        logprobs::chat(self.common.state.tokenizer(), std::slice::from_ref(&t))
                    });
                    let choice = ChatChunkChoice {
                        index,
                        delta: ChatDelta {
                            role: None,
                            content: Some(t.text),
                        },
                        logprobs: lp,
                        finish_reason: None,
                    };
                    out.push(self.chunk(vec![choice], None));
                }
            }
            EngineEvent::Finished {
                reason,
                text,
                usage,
                ..
            } => {
                self.common.finished(&usage);
                if !text.is_empty() {
                    out.push(self.delta(index, text, None));
                }
                out.push(self.delta(index, String::new(), Some(reason.as_str().into())));
            }
            EngineEvent::Failed(f) => out.push(Common::error_payload(&f)),
        }
        out
    }

    fn end(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if self.common.include_usage && self.common.tally.done() {
            out.push(self.chunk(Vec::new(), Some(usage_info(self.common.usage))));
        }
        out.push("[DONE]".to_string());
        out
    }
}
