//! What one request produced: timings and token counts, or why it failed.

use std::fmt;
use std::time::Duration;

/// Timings and counts of a request that streamed to `[DONE]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Time from sending the request to the first chunk with non-empty text.
    pub ttft: Duration,
    /// Gaps between consecutive content chunks (one fewer than `content_chunks`).
    pub itl: Vec<Duration>,
    /// Time from sending the request to `[DONE]`.
    pub e2e: Duration,
    /// Chunks that carried non-empty text.
    pub content_chunks: u64,
    /// `usage.completion_tokens` if the server sent it.
    pub usage_completion_tokens: Option<u64>,
    /// `usage.prompt_tokens` if the server sent it.
    pub usage_prompt_tokens: Option<u64>,
    /// Prompt tokens estimated on the client side.
    pub est_prompt_tokens: u64,
    /// The first attempt hit a connection the server had closed and was sent again.
    pub retried: bool,
    /// When the request was sent, from the start of the run (set by the runner; it places the
    /// request's tokens on the throughput-over-time plot).
    pub sent_at: Duration,
}

impl Measured {
    /// Output tokens: the server's count when reported, else one per content chunk.
    pub fn output_tokens(&self) -> u64 {
        self.usage_completion_tokens.unwrap_or(self.content_chunks)
    }

    /// Prompt tokens: the server's count when reported, else the client estimate.
    pub fn prompt_tokens(&self) -> u64 {
        self.usage_prompt_tokens.unwrap_or(self.est_prompt_tokens)
    }

    /// Time per output token after the first, `(e2e - ttft) / (tokens - 1)`; `None` for fewer
    /// than two tokens.
    pub fn tpot(&self) -> Option<Duration> {
        let tokens = self.output_tokens();
        if tokens < 2 {
            return None;
        }
        let decode = self.e2e.saturating_sub(self.ttft);
        Some(decode.div_f64((tokens - 1) as f64))
    }
}

/// Why a request is counted as failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestFailure {
    /// The server answered with a non-success status.
    Http {
        /// HTTP status code.
        status: u16,
        /// Start of the response body.
        body: String,
    },
    /// Connecting, sending, or reading the body failed.
    Transport(String),
    /// The request did not finish within `--timeout`.
    Timeout(Duration),
    /// The stream was malformed: an error event, invalid JSON, no text, or no `[DONE]`.
    Stream(String),
    /// The task running the request panicked (a bug in the benchmark).
    Internal(String),
}

impl RequestFailure {
    /// Short label used to group failures in the report, e.g. `http_429`, `timeout`.
    pub fn kind(&self) -> String {
        match self {
            Self::Http { status, .. } => format!("http_{status}"),
            Self::Transport(_) => "transport".into(),
            Self::Timeout(_) => "timeout".into(),
            Self::Stream(_) => "stream".into(),
            Self::Internal(_) => "internal".into(),
        }
    }
}

impl fmt::Display for RequestFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http { status, body } => write!(f, "HTTP {status}: {body}"),
            Self::Transport(m) => write!(f, "transport error: {m}"),
            Self::Timeout(t) => write!(f, "timed out after {:.1} s", t.as_secs_f64()),
            Self::Stream(m) => write!(f, "bad stream: {m}"),
            Self::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

/// Result of one request.
pub type RequestOutcome = Result<Measured, RequestFailure>;

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(usage: Option<u64>, chunks: u64) -> Measured {
        Measured {
            ttft: Duration::from_millis(100),
            itl: vec![],
            e2e: Duration::from_millis(400),
            content_chunks: chunks,
            usage_completion_tokens: usage,
            usage_prompt_tokens: None,
            est_prompt_tokens: 10,
            retried: false,
            sent_at: Duration::ZERO,
        }
    }

    #[test]
    fn tpot_uses_usage_tokens_when_present() {
        assert_eq!(
            measured(Some(4), 2).tpot(),
            Some(Duration::from_millis(100))
        );
        assert_eq!(measured(None, 7).tpot(), Some(Duration::from_millis(50)));
        assert_eq!(measured(Some(1), 1).tpot(), None);
        assert_eq!(measured(None, 5).prompt_tokens(), 10);
    }

    #[test]
    fn failure_kinds() {
        let http = RequestFailure::Http {
            status: 429,
            body: "slow down".into(),
        };
        assert_eq!(http.kind(), "http_429");
        assert_eq!(http.to_string(), "HTTP 429: slow down");
        assert_eq!(
            RequestFailure::Timeout(Duration::from_secs(2)).kind(),
            "timeout"
        );
    }
}
