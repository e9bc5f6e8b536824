//! Per-request timing state: turns timestamped SSE payloads into a [`Measured`].
//!
//! Timing follows vLLM's `bench serve`: TTFT is taken at the first chunk with non-empty text;
//! every later content chunk adds one inter-token latency (the gap since the previous content
//! chunk). The reply's text is kept too ([`Streamed`]), for callers that send it back as
//! conversation history. A chunk that carries several tokens still adds one ITL sample, so ITL samples can be
//! fewer than `output_tokens - 1`; the report counts such requests. Chunks that arrive in one
//! network read share one timestamp (their gap is 0).

use std::time::Instant;

use crate::chunk::{parse_chunk, ChunkEvent, Usage};
use crate::outcome::{Measured, RequestFailure};

/// A finished stream: its measurement, the reply text and the prefix-cache hit the server
/// reported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Streamed {
    pub measured: Measured,
    /// The generated text (`text` or `delta.content` of every chunk, in order).
    pub reply: String,
    /// `usage.prompt_tokens_details.cached_tokens`, when the server reported it.
    pub cached_tokens: Option<u64>,
}

/// Accumulates one streaming response.
#[derive(Debug)]
pub(crate) struct Tracker {
    start: Instant,
    est_prompt_tokens: u64,
    first_content: Option<Instant>,
    last_content: Option<Instant>,
    itl: Vec<std::time::Duration>,
    content_chunks: u64,
    usage: Usage,
    done_at: Option<Instant>,
    retried: bool,
    reply: String,
}

impl Tracker {
    /// Starts timing a request sent at `start` (`retried`: it is a second attempt).
    pub fn new(start: Instant, est_prompt_tokens: u64, retried: bool) -> Self {
        Self {
            start,
            est_prompt_tokens,
            first_content: None,
            last_content: None,
            itl: Vec::new(),
            content_chunks: 0,
            usage: Usage::default(),
            done_at: None,
            retried,
            reply: String::new(),
        }
    }

    /// Whether `[DONE]` was seen.
    pub fn is_done(&self) -> bool {
        self.done_at.is_some()
    }

    /// Records one SSE payload received at `at`. Payloads after `[DONE]` are ignored.
    pub fn on_payload(&mut self, payload: &str, at: Instant) -> Result<(), RequestFailure> {
        if self.is_done() {
            return Ok(());
        }
        match parse_chunk(payload) {
            ChunkEvent::Done => self.done_at = Some(at),
            ChunkEvent::Error(m) => return Err(RequestFailure::Stream(m)),
            ChunkEvent::Chunk {
                has_content,
                content,
                usage,
            } => {
                if let Some(u) = usage {
                    self.usage.prompt_tokens = u.prompt_tokens.or(self.usage.prompt_tokens);
                    self.usage.completion_tokens =
                        u.completion_tokens.or(self.usage.completion_tokens);
                    self.usage.cached_tokens = u.cached_tokens.or(self.usage.cached_tokens);
                }
                self.reply.push_str(&content);
                if has_content {
                    self.on_content(at);
                }
            }
        }
        Ok(())
    }

    fn on_content(&mut self, at: Instant) {
        if let Some(prev) = self.last_content {
            self.itl.push(at.saturating_duration_since(prev));
        } else {
            self.first_content = Some(at);
        }
        self.last_content = Some(at);
        self.content_chunks += 1;
    }

    /// Completes the measurement (with the reply text and the reported cached tokens); fails
    /// when `[DONE]` or any text is missing.
    pub fn finish(self) -> Result<Streamed, RequestFailure> {
        let Some(done_at) = self.done_at else {
            return Err(RequestFailure::Stream("stream ended before [DONE]".into()));
        };
        let Some(first) = self.first_content else {
            return Err(RequestFailure::Stream(
                "no generated text before [DONE]".into(),
            ));
        };
        let measured = Measured {
            ttft: first.saturating_duration_since(self.start),
            itl: self.itl,
            e2e: done_at.saturating_duration_since(self.start),
            content_chunks: self.content_chunks,
            usage_completion_tokens: self.usage.completion_tokens,
            usage_prompt_tokens: self.usage.prompt_tokens,
            est_prompt_tokens: self.est_prompt_tokens,
            retried: self.retried,
            sent_at: std::time::Duration::ZERO,
        };
        Ok(Streamed {
            measured,
            reply: self.reply,
            cached_tokens: self.usage.cached_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const TEXT: &str = r#"{"choices":[{"text":"x"}]}"#;
    const EMPTY: &str = r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
    const USAGE: &str = r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":6}}"#;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn ttft_itl_e2e_from_timestamps() {
        let t0 = Instant::now();
        let mut t = Tracker::new(t0, 3, false);
        t.on_payload(EMPTY, ms(t0, 10)).unwrap();
        for at in [100, 150, 150, 230] {
            t.on_payload(TEXT, ms(t0, at)).unwrap();
        }
        t.on_payload(USAGE, ms(t0, 240)).unwrap();
        t.on_payload("[DONE]", ms(t0, 250)).unwrap();
        t.on_payload(TEXT, ms(t0, 999)).unwrap();
        let m = t.finish().unwrap().measured;
        assert_eq!(m.ttft, Duration::from_millis(100));
        let itl: Vec<u128> = m.itl.iter().map(Duration::as_millis).collect();
        assert_eq!(itl, vec![50, 0, 80]);
        assert_eq!(m.e2e, Duration::from_millis(250));
        assert_eq!(m.content_chunks, 4);
        assert_eq!((m.output_tokens(), m.prompt_tokens()), (6, 9));
    }

    #[test]
    fn reply_text_and_cached_tokens_are_kept() {
        let t0 = Instant::now();
        let mut t = Tracker::new(t0, 3, false);
        t.on_payload(EMPTY, ms(t0, 1)).unwrap();
        t.on_payload(r#"{"choices":[{"delta":{"content":"Hel"}}]}"#, ms(t0, 2))
            .unwrap();
        t.on_payload(r#"{"choices":[{"delta":{"content":"lo"}}]}"#, ms(t0, 3))
            .unwrap();
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,
            "prompt_tokens_details":{"cached_tokens":6}}}"#;
        t.on_payload(usage, ms(t0, 4)).unwrap();
        t.on_payload("[DONE]", ms(t0, 5)).unwrap();
        let s = t.finish().unwrap();
        assert_eq!((s.reply.as_str(), s.cached_tokens), ("Hello", Some(6)));
        assert_eq!(s.measured.prompt_tokens(), 9);
    }

    #[test]
    fn missing_done_or_text_fails() {
        let t0 = Instant::now();
        let mut t = Tracker::new(t0, 1, false);
        t.on_payload(TEXT, ms(t0, 5)).unwrap();
        assert!(matches!(t.finish(), Err(RequestFailure::Stream(m)) if m.contains("[DONE]")));
        let mut t = Tracker::new(t0, 1, false);
        t.on_payload("[DONE]", ms(t0, 5)).unwrap();
        assert!(matches!(t.finish(), Err(RequestFailure::Stream(m)) if m.contains("no generated")));
    }

    #[test]
    fn error_event_fails_immediately() {
        let mut t = Tracker::new(Instant::now(), 1, true);
        let err = t.on_payload(r#"{"error":{"message":"kv cache full"}}"#, Instant::now());
        assert!(matches!(err, Err(RequestFailure::Stream(m)) if m.contains("kv cache full")));
    }
}
