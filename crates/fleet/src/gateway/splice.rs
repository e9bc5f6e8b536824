//! [`Splice`]: joins the runs of one request into the single stream the client sees. A re-run
//! (a higher attempt, after a worker died) starts from the first token again; the tokens the
//! client already has are skipped, after checking that the re-run produced the same ones. If it
//! did not, the client gets an error, never a text spliced from two different runs.

use kestrel_engine::api::{EngineEvent, EngineFailure};

/// What to do with one result.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send this event to the client.
    Forward(EngineEvent),
    /// Already sent (a re-run repeating it), or from an older run: drop it.
    Skip,
    /// The re-run diverged from what the client has: fail the request with this.
    Diverged(EngineFailure),
}

/// The splicing state of one request.
#[derive(Debug, Default)]
pub struct Splice {
    /// Token ids the client has received.
    sent: Vec<u32>,
    /// The run being followed.
    attempt: u32,
    /// Tokens of that run seen so far.
    seen: usize,
    /// The run and place of the last result entry taken (see [`Splice::is_repeat`]).
    last_entry: Option<(u32, u32)>,
}

impl Splice {
    /// Whether `attempt` starts a newer run than the one followed (a redelivery).
    pub fn is_rerun(&self, attempt: u32) -> bool {
        self.attempt > 0 && attempt > self.attempt
    }

    /// Whether the entry numbered `seq` of run `attempt` repeats one already taken: an
    /// append the worker retried after Redis wrote it but lost the reply. Entries without a
    /// number (older workers) are never repeats.
    pub fn is_repeat(&mut self, attempt: u32, seq: Option<u32>) -> bool {
        let Some(seq) = seq else { return false };
        if matches!(self.last_entry, Some((a, s)) if a == attempt && seq <= s) {
            return true;
        }
        self.last_entry = Some((attempt, seq));
        false
    }

    /// Tokens the client has received.
    pub fn sent(&self) -> usize {
        self.sent.len()
    }

    /// Decides what to do with `event` of run `attempt`.
    pub fn step(&mut self, attempt: u32, event: EngineEvent) -> Step {
        if attempt < self.attempt {
            return Step::Skip;
        }
        if attempt > self.attempt {
            self.attempt = attempt;
            self.seen = 0;
        }
        let EngineEvent::Token(token) = event else {
            return Step::Forward(event);
        };
        let index = self.seen;
        self.seen += 1;
        match self.sent.get(index) {
            None => {
                self.sent.push(token.id);
                Step::Forward(EngineEvent::Token(token))
            }
            Some(&id) if id == token.id => Step::Skip,
            Some(&id) => Step::Diverged(EngineFailure::Internal(format!(
                "the re-run of this request after a worker failure produced token {} at position {index} where the first run produced {id}",
                token.id
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use kestrel_engine::api::{RequestTimings, TokenEvent, Usage};
    use kestrel_engine::request::FinishReason;

    use super::*;

    fn tok(id: u32) -> EngineEvent {
        EngineEvent::Token(TokenEvent {
            id,
            text: format!("<{id}>"),
            logprobs: None,
        })
    }

    fn done() -> EngineEvent {
        EngineEvent::Finished {
            reason: FinishReason::Stop,
            text: String::new(),
            usage: Usage::default(),
            timings: RequestTimings::default(),
        }
    }

    fn forwarded(steps: &[Step]) -> Vec<u32> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Forward(EngineEvent::Token(t)) => Some(t.id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_rerun_skips_what_was_sent_and_continues() {
        let mut s = Splice::default();
        let mut steps = vec![s.step(1, tok(5)), s.step(1, tok(6))];
        assert!(s.is_rerun(2));
        for id in [5, 6, 7, 8] {
            steps.push(s.step(2, tok(id)));
        }
        steps.push(s.step(2, done()));
        assert_eq!(forwarded(&steps), vec![5, 6, 7, 8]);
        assert_eq!(steps.last(), Some(&Step::Forward(done())));
        assert_eq!(s.sent(), 4);
    }

    #[test]
    fn a_retried_append_is_taken_once() {
        let mut s = Splice::default();
        let taken: Vec<bool> = [
            (1, 0),
            (1, 1),
            (1, 2),
            (1, 2),
            (1, 3),
            (2, 0),
            (2, 1),
            (2, 1),
        ]
        .into_iter()
        .map(|(attempt, seq)| !s.is_repeat(attempt, Some(seq)))
        .collect();
        assert_eq!(
            taken,
            [true, true, true, false, true, true, true, false],
            "the second copies of (1, 2) and (2, 1) are dropped; a new run starts over"
        );
        assert!(
            !s.is_repeat(2, None) && !s.is_repeat(2, None),
            "unnumbered entries pass"
        );
    }

    #[test]
    fn a_diverging_rerun_fails_instead_of_splicing() {
        let mut s = Splice::default();
        s.step(1, tok(5));
        s.step(1, tok(6));
        assert_eq!(s.step(2, tok(5)), Step::Skip);
        assert!(matches!(s.step(2, tok(9)), Step::Diverged(_)));
    }

    #[test]
    fn late_events_of_an_older_run_are_dropped() {
        let mut s = Splice::default();
        s.step(1, tok(1));
        s.step(2, tok(1));
        s.step(2, tok(2));
        assert_eq!(s.step(1, tok(2)), Step::Skip);
        assert_eq!(s.step(2, tok(3)), Step::Forward(tok(3)));
    }

    #[test]
    fn the_first_run_is_not_a_rerun() {
        let s = Splice::default();
        assert!(!s.is_rerun(1));
    }
}
