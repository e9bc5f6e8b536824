//! Engine steps as a traced request sees them: each step that ran at least one traced
//! sequence (a request with a [`TraceParent`]) is reported once, with its start and end and,
//! per traced sequence, how many tokens it computed and whether they were prompt tokens
//! (a prefill chunk) or decoding.
//!
//! The engine thread only copies these few numbers into a bounded channel and never waits
//! for the reader ([`crate::handle::EngineHandle::watch_steps`]); whoever reads it turns them
//! into spans with those times, off the engine thread. With no watcher, a step costs one
//! branch more.

use std::time::Instant;

use crate::request::RequestId;
use crate::trace_parent::TraceParent;

/// One engine step that ran traced sequences.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTrace {
    pub start: Instant,
    pub end: Instant,
    /// Sequences in the step's batch, traced ones only.
    pub seqs: Vec<TracedSeq>,
    /// Sequences in the whole batch (traced or not).
    pub batch_seqs: usize,
}

/// A traced request's part in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracedSeq {
    pub request: RequestId,
    pub trace: TraceParent,
    /// Tokens the step computed for it.
    pub tokens: usize,
    /// Whether they were prompt tokens (a prefill chunk) rather than decoding.
    pub prefill: bool,
}
