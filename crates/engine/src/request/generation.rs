//! [`Generation`]: the part of a [`super::Request`] that turns logits into text for a client:
//! its sampler, incremental detokenizer with stop strings, event channel and timestamps.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::api::{EngineEvent, EngineFailure, EngineRequest, RequestTimings, TokenEvent, Usage};
use crate::constraint::ConstraintMatcher;
use crate::metrics::{
    record_admitted, record_failed, record_finished, record_slo_outcome, record_token,
};
use crate::output::{TextStream, TokenDecoder};
use crate::request::FinishReason;
use crate::sampling::{
    logprobs, Logprobs, SampleError, Sampler, SamplerScratch, SamplingParams, TokenHistory,
};

/// A request's sampling and streaming state.
#[derive(Debug)]
pub struct Generation {
    /// Where events go; `None` for a request nobody listens to (scheduler tests).
    events: Option<UnboundedSender<EngineEvent>>,
    sampler: Sampler,
    text: TextStream,
    num_logprobs: Option<usize>,
    pending_logprobs: Option<Logprobs>,
    prompt_len: usize,
    arrival: Instant,
    max_queue_time: Option<Duration>,
    /// The first-token objective, if the request has one (counted met or missed once).
    ttft_slo: Option<Duration>,
    scheduled_at: Option<Instant>,
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    cached_tokens: usize,
    completion_tokens: usize,
    /// Text withheld by the detokenizer or stop matcher, flushed when the request ends.
    tail: String,
    /// The grammar the output must follow (structured output), if any.
    constraint: Option<Box<ConstraintMatcher>>,
    /// Where the request's engine steps are traced, if it is.
    trace: Option<crate::trace_parent::TraceParent>,
}

impl Generation {
    /// State for `req` (whose parameters [`EngineRequest::new`] validated), reporting to
    /// `events`; `eos_ids` cannot be sampled before the request's `min_tokens`.
    pub(crate) fn new(
        req: &EngineRequest,
        eos_ids: &[u32],
        events: UnboundedSender<EngineEvent>,
    ) -> Self {
        let mut g = Self::for_prompt(req.prompt_ids(), req.sampling().clone(), req.arrival());
        g.sampler = g.sampler.with_eos_ids(eos_ids);
        g.events = Some(events);
        g.max_queue_time = req.max_queue_time();
        g.ttft_slo = req.ttft_slo();
        g.trace = req.trace();
        g
    }

    /// The parent of the request's traced engine steps, if it is traced.
    pub fn trace(&self) -> Option<crate::trace_parent::TraceParent> {
        self.trace
    }

    /// Greedy state for `prompt` with no listener.
    pub(crate) fn detached(prompt: &[u32]) -> Self {
        let greedy = SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        };
        Self::for_prompt(prompt, greedy, Instant::now())
    }

    fn for_prompt(prompt: &[u32], sampling: SamplingParams, arrival: Instant) -> Self {
        Generation {
            events: None,
            text: TextStream::new(prompt, sampling.stop.iter().cloned())
                .including_stop(sampling.include_stop_str_in_output)
                .keeping_special(!sampling.skip_special_tokens),
            num_logprobs: sampling.logprobs,
            pending_logprobs: None,
            prompt_len: prompt.len(),
            sampler: Sampler::from_validated(sampling),
            arrival,
            max_queue_time: None,
            ttft_slo: None,
            scheduled_at: None,
            first_token_at: None,
            last_token_at: None,
            cached_tokens: 0,
            completion_tokens: 0,
            tail: String::new(),
            constraint: None,
            trace: None,
        }
    }

    /// Constrains the request's output to `matcher`'s grammar.
    pub(crate) fn set_constraint(&mut self, matcher: ConstraintMatcher) {
        self.constraint = Some(Box::new(matcher));
    }

    /// Lends the matcher out (to compute its next mask on another thread); give it back with
    /// [`Self::restore_constraint`].
    pub(crate) fn take_constraint(&mut self) -> Option<Box<ConstraintMatcher>> {
        self.constraint.take()
    }

    /// Returns a matcher lent by [`Self::take_constraint`].
    pub(crate) fn restore_constraint(&mut self, matcher: Box<ConstraintMatcher>) {
        self.constraint = Some(matcher);
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
    /// A constrained request masks the tokens its grammar disallows first, and its matcher
    /// consumes the sampled token.
    pub(crate) fn sample(
        &mut self,
        row: &mut [f32],
        history: &[u32],
        scratch: &mut SamplerScratch,
    ) -> Result<u32, SampleError> {
        let raw = self.num_logprobs.map(|_| row.to_vec());
        if let Some(matcher) = &mut self.constraint {
            matcher.apply(row).map_err(SampleError::Constraint)?;
        }
        let token =
            self.sampler
                .sample(row, TokenHistory::new(history, self.prompt_len), scratch)?;
        if let Some(matcher) = &mut self.constraint {
            matcher.consume(token).map_err(SampleError::Constraint)?;
        }
        self.pending_logprobs = match (raw, self.num_logprobs) {
            (Some(raw), Some(n)) => Some(logprobs(&raw, token, n)?),
            _ => None,
        };
        Ok(token)
    }

    /// Whether this request may take draft tokens (speculative decoding): the one switch for
    /// everything that needs one sampled token per step. Requests asking for logprobs do not
    /// speculate (their logprobs are kept for one token at a time), nor do constrained ones
    /// (their grammar masks one token at a time).
    pub fn can_speculate(&self) -> bool {
        self.num_logprobs.is_none()
            && self.constraint.is_none()
            && self.sampler.params().grammar.is_none()
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
        if let (Some(t), Some(slo)) = (ttft, self.ttft_slo) {
            record_slo_outcome(t <= slo);
        }
        self.first_token_at.get_or_insert(now);
        self.last_token_at = Some(now);
        self.completion_tokens += 1;
        record_token(ttft, gap);
        let step = self.text.push(decoder, id);
        let logprobs = self.pending_logprobs.take();
        self.send(EngineEvent::Token(TokenEvent {
            id,
            text: step.text,
            logprobs,
        }));
        step.stopped.is_some()
    }

    /// Flushes the text withheld so far (kept for the `Finished` event); true if it completed a
    /// stop string.
    pub(crate) fn flush(&mut self, decoder: &impl TokenDecoder) -> bool {
        let tail = self.text.finish(decoder);
        self.tail.push_str(&tail.text);
        tail.stopped.is_some()
    }

    /// A send fails only when the stream was dropped; its abort arrives with the next commands.
    fn send(&self, event: EngineEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(event);
        }
    }

    /// Sends `Finished` with `reason` and the flushed tail text.
    pub(crate) fn finish(mut self, reason: FinishReason, now: Instant) {
        let (usage, timings) = self.summary(now);
        record_finished(reason, &usage, &timings);
        let text = std::mem::take(&mut self.tail);
        self.send(EngineEvent::Finished {
            reason,
            text,
            usage,
            timings,
        });
    }

    /// Records an abort by the client (its stream is gone, so nothing is sent).
    pub(crate) fn aborted(self, now: Instant) {
        self.record_slo_without_token(now);
        let (usage, timings) = self.summary(now);
        record_finished(FinishReason::Abort, &usage, &timings);
    }

    /// Counts the failure and sends `Failed(failure)`.
    pub(crate) fn fail(self, failure: EngineFailure) {
        self.record_slo_without_token(Instant::now());
        record_failed(&failure);
        self.send(EngineEvent::Failed(failure));
    }

    /// A request with an objective that ends without a first token missed it if the objective
    /// had passed by `now` (one that ends sooner is counted neither way).
    fn record_slo_without_token(&self, now: Instant) {
        let Some(slo) = self.ttft_slo else { return };
        if self.first_token_at.is_none() && now.saturating_duration_since(self.arrival) > slo {
            record_slo_outcome(false);
        }
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
