//! [`TtftPredictor`]: how long a request that arrives now will wait for its first token, from
//! the work queued ahead of it and the engine's own recent step timings. The engine refuses a
//! request with a first-token objective (`ttft_slo`) that the prediction says it cannot meet,
//! instead of admitting it only for it to miss (see [`crate::core::EngineCore::admit`]).
//!
//! # The model
//!
//! A request's first token comes out of the step that computes the last chunk of its prompt.
//! Before that, every prompt token queued ahead of it (waiting requests of equal or more urgent
//! priority, and the unfinished prompts of running requests) must be computed too, a step
//! budget at a time, while the running requests that decode take one token of every step:
//!
//! ```text
//! prefill  P = tokens ahead + own prompt tokens - own prefix-cache hits
//! per step C = max(1, step budget - decoding requests)          (prompt tokens per step)
//! steps    S = ceil(P / C)
//! ttft     = waited so far
//!          + P / prefill_rate                                    (prompt work)
//!          + S × decode_step                   if any request decodes (interleaved decode)
//!          + slot_wait_steps × decode_step                      (no free batch slot)
//! ```
//!
//! * `prefill_rate` (prompt tokens per second of step time) is an exponentially weighted
//!   moving average over steps that computed prompt tokens, with the decode share of each such
//!   step (its decoding requests × the per-request decode time) taken out first.
//! * `decode_step` is the same kind of average of the duration of steps that only decoded,
//!   and `decode_token` of those durations divided by their decoding requests.
//! * `slot_wait_steps`: when `max_num_seqs` requests already run, the request waits for enough
//!   of them to end; the scheduler bounds that by their remaining `max_tokens` (an upper bound:
//!   a request may stop earlier at an end-of-sequence token).
//!
//! The model is conservative where it is cheap to be: prefix-cache hits are counted for the new
//! request only (the requests ahead are charged their whole prompts), and a step's fixed cost
//! is part of the measured rates. It knows nothing until the engine has run a step that
//! computed prompt tokens: until then [`TtftPredictor::predict`] answers `None` and requests
//! are admitted (the objective then only counts towards the met/missed metrics).

use std::time::Duration;

/// Weight of the newest sample in the moving averages.
const EWMA_ALPHA: f64 = 0.2;
/// The prompt share of a mixed step is never taken below this fraction of the step (so a
/// decode estimate that is too high cannot make the prefill rate absurdly fast).
const MIN_PREFILL_SHARE: f64 = 0.25;

/// What one engine step computed and how long it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepSample {
    /// Prompt tokens computed (first computation or recomputation after preemption).
    pub prefill_tokens: usize,
    /// Requests that computed one generated token (plus draft tokens) this step.
    pub decode_seqs: usize,
    /// Time spent executing, sampling and updating.
    pub elapsed: Duration,
}

/// The work ahead of a new request, as the scheduler sees it when the request arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Prompt tokens that must be computed before this request's first token, its own
    /// (less its prefix-cache hits) included.
    pub prefill_tokens: usize,
    /// Running requests past their prompt: each takes one token of every step.
    pub decode_seqs: usize,
    /// Decode steps until a batch slot frees up (0 when one is free).
    pub slot_wait_steps: usize,
    /// Token budget of one step.
    pub step_budget: usize,
}

/// Measured step costs and the first-token prediction made from them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TtftPredictor {
    /// Prompt tokens per second of (prompt share of) step time.
    prefill_rate: Option<f64>,
    /// Seconds of a step that only decodes.
    decode_step: Option<f64>,
    /// Seconds per decoding request in a decode-only step.
    decode_token: Option<f64>,
}

impl TtftPredictor {
    /// A predictor that has measured nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one step's timing into the averages. Empty or zero-length steps are ignored.
    pub fn record(&mut self, s: StepSample) {
        let secs = s.elapsed.as_secs_f64();
        if secs <= 0.0 || (s.prefill_tokens == 0 && s.decode_seqs == 0) {
            return;
        }
        if s.prefill_tokens == 0 {
            ewma(&mut self.decode_step, secs);
            ewma(&mut self.decode_token, secs / s.decode_seqs as f64);
            return;
        }
        let decode_share = self.decode_token.unwrap_or(0.0) * s.decode_seqs as f64;
        let prefill_secs = (secs - decode_share).max(secs * MIN_PREFILL_SHARE);
        ewma(
            &mut self.prefill_rate,
            s.prefill_tokens as f64 / prefill_secs,
        );
    }

    /// Prompt tokens per second, once measured.
    pub fn prefill_rate(&self) -> Option<f64> {
        self.prefill_rate
    }

    /// Duration of a decode-only step, once measured.
    pub fn decode_step(&self) -> Option<Duration> {
        self.decode_step.map(Duration::from_secs_f64)
    }

    /// Time from now to the first token of a request with `backlog` ahead of it (see the module
    /// docs); `None` until a step that computed prompt tokens was measured.
    pub fn predict(&self, backlog: &Backlog) -> Option<Duration> {
        let rate = self.prefill_rate.filter(|r| *r > 0.0)?;
        // Without a measured decode-only step, a decoding request is charged what a prompt
        // token costs (a decode token is never cheaper than that on this engine).
        let decode_step = self
            .decode_step
            .unwrap_or(backlog.decode_seqs as f64 / rate);
        let prefill = backlog.prefill_tokens as f64;
        let per_step = backlog
            .step_budget
            .saturating_sub(backlog.decode_seqs)
            .max(1) as f64;
        let steps = (prefill / per_step).ceil();
        let mut secs = prefill / rate;
        if backlog.decode_seqs > 0 {
            secs += steps * decode_step;
        }
        secs += backlog.slot_wait_steps as f64 * decode_step;
        Some(Duration::from_secs_f64(secs.min(1e9)))
    }
}

fn ewma(slot: &mut Option<f64>, sample: f64) {
    *slot = Some(match *slot {
        Some(old) => old + EWMA_ALPHA * (sample - old),
        None => sample,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(prefill_tokens: usize, decode_seqs: usize, ms: u64) -> StepSample {
        StepSample {
            prefill_tokens,
            decode_seqs,
            elapsed: Duration::from_millis(ms),
        }
    }

    fn backlog(prefill_tokens: usize, decode_seqs: usize) -> Backlog {
        Backlog {
            prefill_tokens,
            decode_seqs,
            slot_wait_steps: 0,
            step_budget: 512,
        }
    }

    #[test]
    fn nothing_measured_predicts_nothing() {
        let p = TtftPredictor::new();
        assert_eq!(p.predict(&backlog(10_000, 3)), None);
        let mut p = TtftPredictor::new();
        p.record(step(0, 0, 10));
        p.record(step(100, 0, 0));
        assert_eq!(
            p.predict(&backlog(1, 0)),
            None,
            "empty steps are not samples"
        );
    }

    #[test]
    fn prompt_work_over_the_measured_rate() {
        let mut p = TtftPredictor::new();
        p.record(step(500, 0, 100)); // 5000 tokens/s
        assert_eq!(p.prefill_rate(), Some(5000.0));
        let t = p.predict(&backlog(2500, 0)).unwrap();
        assert!((t.as_secs_f64() - 0.5).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn decoding_requests_lengthen_every_step() {
        let mut p = TtftPredictor::new();
        p.record(step(0, 10, 20)); // decode-only: 20 ms a step, 2 ms a request
        p.record(step(400, 10, 120)); // 120 ms - 10 × 2 ms = 100 ms for 400 tokens
        assert!((p.prefill_rate().unwrap() - 4000.0).abs() < 1e-6);
        // 1004 tokens at 502 a step (512 - 10 decoding) = 2 steps: 251 ms + 2 × 20 ms.
        let t = p.predict(&backlog(1004, 10)).unwrap();
        assert!((t.as_secs_f64() - 0.291).abs() < 1e-9, "{t:?}");
        let idle = p.predict(&backlog(1004, 0)).unwrap();
        assert!(idle < t, "no decoding requests, no decode steps");
    }

    #[test]
    fn a_full_batch_adds_its_decode_steps() {
        let mut p = TtftPredictor::new();
        p.record(step(100, 0, 10));
        p.record(step(0, 4, 50));
        let free = p.predict(&backlog(100, 4)).unwrap();
        let full = p
            .predict(&Backlog {
                slot_wait_steps: 30,
                ..backlog(100, 4)
            })
            .unwrap();
        let extra = (full - free).as_secs_f64();
        assert!((extra - 1.5).abs() < 1e-9, "30 steps of 50 ms: {extra}");
    }

    #[test]
    fn averages_move_towards_new_samples() {
        let mut p = TtftPredictor::new();
        p.record(step(1000, 0, 100)); // 10k/s
        p.record(step(1000, 0, 1000)); // 1k/s
        let r = p.prefill_rate().unwrap();
        assert!(
            (r - (10_000.0 + 0.2 * (1000.0 - 10_000.0))).abs() < 1e-6,
            "{r}"
        );
    }
}
