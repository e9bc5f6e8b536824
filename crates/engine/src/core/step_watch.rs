//! [`StepWatch`]: sends the engine's steps that ran traced requests to a watcher
//! ([`crate::step_trace`]), never waiting for it: a step that does not fit in the channel is
//! dropped (its spans are missing from the trace, the requests are unaffected).

use std::time::Instant;

use tokio::sync::mpsc::Sender;

use crate::scheduler::{Scheduler, SchedulerOutput};
use crate::step_trace::{StepTrace, TracedSeq};

/// The watcher's end of the channel.
pub struct StepWatch {
    sink: Sender<StepTrace>,
}

impl StepWatch {
    pub fn new(sink: Sender<StepTrace>) -> StepWatch {
        StepWatch { sink }
    }

    /// The traced sequences of `out`, read before the step runs (a request that finishes in
    /// the step leaves the scheduler during it).
    pub fn traced(out: &SchedulerOutput, scheduler: &Scheduler) -> Vec<TracedSeq> {
        out.batch
            .seqs
            .iter()
            .filter_map(|seq| {
                let req = scheduler.request(seq.request_id)?;
                let trace = req.generation().trace()?;
                Some(TracedSeq {
                    request: seq.request_id,
                    trace,
                    tokens: seq.tokens.len(),
                    prefill: seq.start_pos < req.prompt_token_ids().len(),
                })
            })
            .collect()
    }

    /// Reports a step that ran `seqs` (nothing when none is traced). Returns false once the
    /// watcher is gone.
    pub fn send(&self, start: Instant, seqs: Vec<TracedSeq>, batch_seqs: usize) -> bool {
        if seqs.is_empty() {
            return !self.sink.is_closed();
        }
        let step = StepTrace {
            start,
            end: Instant::now(),
            seqs,
            batch_seqs,
        };
        !matches!(
            self.sink.try_send(step),
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_))
        )
    }
}
