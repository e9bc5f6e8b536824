//! One conversation: its history as chat messages, and the loop that sends its turns.
//!
//! ```text
//!  turn 1: [system?, user 1]                              -> reply 1
//!  turn 2: [system?, user 1, reply 1, user 2]             -> reply 2   (after --think-time)
//!  turn 3: [system?, user 1, reply 1, user 2, reply 2, user 3] ...
//! ```
//!
//! The assistant messages are the replies the server actually streamed, so every turn's prompt
//! begins with the previous turn's prompt and reply: what a prefix cache can reuse. A turn that
//! fails ends its conversation (its reply is missing from the history, and inventing one would
//! change the prefix the next turn is measured on); the turns left are counted as skipped.

use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};

use super::plan::ConversationScript;
use crate::client::{chat_body, send_body, Target};
use crate::outcome::{Measured, RequestFailure};

/// A conversation's messages so far, in the chat API's shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct History {
    messages: Vec<Value>,
    /// Words of all messages: the prompt estimate when the server reports no usage.
    words: u64,
}

impl History {
    /// A history that starts with `system`, if any.
    pub fn new(system: Option<&str>) -> Self {
        let mut h = Self::default();
        if let Some(text) = system {
            h.push("system", text);
        }
        h
    }

    /// Appends one message.
    pub fn push(&mut self, role: &str, content: &str) {
        self.words += content.split_whitespace().count() as u64;
        self.messages
            .push(json!({ "role": role, "content": content }));
    }

    /// The `messages` array of the next request.
    pub fn messages(&self) -> Value {
        Value::Array(self.messages.clone())
    }

    /// Client-side prompt estimate: one token per word.
    pub fn est_tokens(&self) -> u64 {
        self.words
    }
}

/// A successful turn: its timings and the cached tokens the server reported.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnResult {
    /// Timings and token counts of the request.
    pub measured: Measured,
    /// `usage.prompt_tokens_details.cached_tokens`, when reported.
    pub cached_tokens: Option<u64>,
}

/// What one sent turn produced.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    /// The conversation, from 0.
    pub conversation: usize,
    /// The turn within it, from 0.
    pub turn: usize,
    /// Its measurement, or why it failed.
    pub outcome: Result<TurnResult, RequestFailure>,
}

/// What every conversation of a run shares.
pub(crate) struct ConversationContext<'a> {
    pub target: &'a Target,
    pub think_time: Duration,
    pub max_tokens: u32,
    /// Start of the run (places each request on the run's clock).
    pub run_start: Instant,
    pub progress: &'a ProgressBar,
}

/// Sends the turns of `script` one after another; stops at the first failed turn.
pub(crate) async fn run_conversation(
    ctx: &ConversationContext<'_>,
    script: &ConversationScript,
) -> Vec<TurnRecord> {
    let mut history = History::new(script.system.as_deref());
    let mut records = Vec::with_capacity(script.user_turns.len());
    for (turn, user) in script.user_turns.iter().enumerate() {
        if turn > 0 && !ctx.think_time.is_zero() {
            tokio::time::sleep(ctx.think_time).await;
        }
        history.push("user", user);
        let outcome = send_turn(ctx, &history).await;
        let reply = outcome.as_ref().ok().map(|(_, reply)| reply.clone());
        records.push(TurnRecord {
            conversation: script.id,
            turn,
            outcome: outcome.map(|(result, _)| result),
        });
        ctx.progress.inc(1);
        match reply {
            Some(text) => history.push("assistant", &text),
            None => {
                let left = script.user_turns.len() - turn - 1;
                ctx.progress.inc(left as u64);
                break;
            }
        }
    }
    records
}

/// One request with the whole history; the result and the reply text.
async fn send_turn(
    ctx: &ConversationContext<'_>,
    history: &History,
) -> Result<(TurnResult, String), RequestFailure> {
    let body = chat_body(ctx.target, history.messages(), ctx.max_tokens);
    let sent_at = ctx.run_start.elapsed();
    let streamed = send_body(ctx.target, &body, history.est_tokens()).await?;
    let mut measured = streamed.measured;
    measured.sent_at = sent_at;
    let result = TurnResult {
        measured,
        cached_tokens: streamed.cached_tokens,
    };
    Ok((result, streamed.reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_roles_in_order_and_counts_words() {
        let mut h = History::new(Some("be brief"));
        h.push("user", "hello there");
        h.push("assistant", "hi");
        h.push("user", "one more question");
        let m = h.messages();
        let roles: Vec<&str> = m
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(m[2]["content"], "hi");
        assert_eq!(h.est_tokens(), 8);
        assert!(History::new(None).messages().as_array().unwrap().is_empty());
    }
}
