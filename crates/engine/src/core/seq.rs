//! [`SeqState`]: what the engine core keeps per live request besides the scheduler's
//! [`crate::request::Request`]: its event channel, sampler, text stream and timestamps.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::api::{EngineEvent, EngineFailure, EngineRequest, RequestTimings, TokenEvent, Usage};
use crate::metrics::{record_admitted, record_finished, record_token};
use crate::output::{TextStream, TokenDecoder};
use crate::request::FinishReason;
use crate::sampling::{logprobs, Logprobs, SampleError, Sampler, SamplingParamError, TokenHistory};

/// One live request's engine-side state.
pub(crate) struct SeqState {
    events: UnboundedSender<EngineEvent>,
    sampler: Sampler,
    text: TextStream,
    num_logprobs: Option<usize>,
    pending_logprobs: Option<Logprobs>,
    prompt_len: usize,
    arrival: Instant,
    max_queue_time: Option<Duration>,
    scheduled_at: Option<Instant>,
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    cached_tokens: usize,
    completion_tokens: usize,
}

impl SeqState {
    /// State for `req`, whose events go to `events`.
    pub(crate) fn new(
        req: &EngineRequest,
        events: UnboundedSender<EngineEvent>,
    ) -> Result<Self, SamplingParamError> {
        let sampler = Sampler::new(req.sampling.clone())?;
        Ok(SeqState {
            events,
            text: TextStream::new(&req.prompt_ids, req.sampling.stop.iter().cloned()),
            num_logprobs: req.sampling.logprobs,
            pending_logprobs: None,
            prompt_len: req.prompt_ids.len(),
            sampler,
            arrival: req.arrival,
            max_queue_time: req.max_queue_time,
            scheduled_at: None,
            first_token_at: None,
            last_token_at: None,
            cached_tokens: 0,
            completion_tokens: 0,
        })
    }

    /// The queue timeout, if the request never ran and waited longer than it by `now`.
    pub(crate) fn queue_expired(&self, now: Instant) -> Option<Duration> {
        let limit = self.max_queue_time?;
        let waited = now.saturating_duration_since(self.arrival);
        (self.scheduled_at.is_none() && waited > limit).then_some(limit)
    }

    /// Notes that the request was scheduled with `start_pos` tokens already computed; the first
    /// time, these are its prefix-cache hits and its prompt length is returned.
    pub(crate) fn mark_scheduled(&mut self, now: Instant, start_pos: usize) -> Option<usize> {
        if self.scheduled_at.is_some() {
            return None;
        }
        self.scheduled_at = Some(now);
        self.cached_tokens = start_pos;
        record_admitted(self.prompt_len, now.saturating_duration_since(self.arrival));
        Some(self.prompt_len)
    }

    /// Samples the next token from `row` (modified in place by penalties) given `history`
    /// (prompt + generated ids). Logprobs, when asked for, are those of the raw logits.
    pub(crate) fn sample(&mut self, row: &mut [f32], history: &[u32]) -> Result<u32, SampleError> {
        let raw = self.num_logprobs.map(|_| row.to_vec());
        let token = self
            .sampler
            .sample(row, TokenHistory::new(history, self.prompt_len))?;
        self.pending_logprobs = match (raw, self.num_logprobs) {
            (Some(raw), Some(n)) => Some(logprobs(&raw, token, n)?),
            _ => None,
        };
        Ok(token)
    }

    /// Streams generated token `id`; returns true when a stop string ended the text.
    pub(crate) fn push_token(
        &mut self,
        decoder: &impl TokenDecoder,
        id: u32,
        now: Instant,
    ) -> bool {
        let ttft = self
            .first_token_at
            .is_none()
            .then(|| now.saturating_duration_since(self.arrival));
        let gap = self.last_token_at.map(|t| now.saturating_duration_since(t));
        self.first_token_at.get_or_insert(now);
        self.last_token_at = Some(now);
        self.completion_tokens += 1;
        record_token(ttft, gap);
        let step = self.text.push(decoder, id);
        let logprobs = self.pending_logprobs.take();
        // A send fails only when the stream was dropped; its abort arrives with the next commands.
        let _ = self.events.send(EngineEvent::Token(TokenEvent {
            id,
            text: step.text,
            logprobs,
        }));
        step.stopped.is_some()
    }

    /// Sends `Finished` with the withheld text. A stop string found in that tail turns `reason`
    /// into [`FinishReason::Stop`]; `stopped` says one already fired.
    pub(crate) fn finish(
        mut self,
        decoder: &impl TokenDecoder,
        reason: FinishReason,
        stopped: bool,
        now: Instant,
    ) {
        let (text, reason) = if stopped {
            (String::new(), FinishReason::Stop)
        } else {
            let tail = self.text.finish(decoder);
            let reason = if tail.stopped.is_some() {
                FinishReason::Stop
            } else {
                reason
            };
            (tail.text, reason)
        };
        let (usage, timings) = self.summary(now);
        record_finished(reason, &usage, &timings);
        let _ = self.events.send(EngineEvent::Finished {
            reason,
            text,
            usage,
            timings,
        });
    }

    /// Records an abort by the client (its stream is gone, so nothing is sent).
    pub(crate) fn aborted(self, now: Instant) {
        let (usage, timings) = self.summary(now);
        record_finished(FinishReason::Abort, &usage, &timings);
    }

    /// Sends `Failed(failure)`.
    pub(crate) fn fail(self, failure: EngineFailure) {
        let _ = self.events.send(EngineEvent::Failed(failure));
    }

    fn summary(&self, now: Instant) -> (Usage, RequestTimings) {
        let since = |t: Option<Instant>| {
            t.map_or(Duration::ZERO, |t| {
                t.saturating_duration_since(self.arrival)
            })
        };
        let usage = Usage {
            prompt_tokens: self.prompt_len,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
        };
        let timings = RequestTimings {
            queue: since(self.scheduled_at),
            time_to_first_token: since(self.first_token_at),
            end_to_end: now.saturating_duration_since(self.arrival),
        };
        (usage, timings)
    }
}
