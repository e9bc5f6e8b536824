//! The load phase of `--multi-turn`: every conversation is a task; at most `--concurrency` of
//! them are active at once (a FIFO semaphore, so they start in order). A conversation holds its
//! slot through its think times, like one user of a chat application.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tokio::sync::Semaphore;

use super::conversation::{run_conversation, ConversationContext, TurnRecord};
use super::plan::{ConversationScript, MultiTurnPlan};
use crate::client::Target;
use crate::outcome::RequestFailure;

/// Everything the load phase measured.
#[derive(Debug)]
pub(crate) struct MultiTurnResult {
    /// One record per sent turn, by conversation then turn.
    pub records: Vec<TurnRecord>,
    /// From the start of the first conversation to the end of the last.
    pub duration: Duration,
}

/// What the conversation tasks share.
struct Shared {
    target: Target,
    slots: Semaphore,
    think_time: Duration,
    max_tokens: u32,
    progress: ProgressBar,
}

/// Runs every conversation of the plan against the target.
pub(crate) async fn run_conversations(
    plan: &MultiTurnPlan,
    target: Target,
    progress: ProgressBar,
) -> MultiTurnResult {
    let shared = Arc::new(Shared {
        target,
        slots: Semaphore::new(plan.shape.concurrency),
        think_time: plan.think_time,
        max_tokens: plan.shape.max_tokens,
        progress,
    });
    let start = Instant::now();
    let handles: Vec<_> = plan
        .scripts
        .iter()
        .map(|script| {
            let task = one_conversation(Arc::clone(&shared), script.clone(), start);
            (script.id, tokio::spawn(task))
        })
        .collect();
    let mut records = Vec::with_capacity(plan.total_turns());
    for (id, handle) in handles {
        match handle.await {
            Ok(turns) => records.extend(turns),
            Err(e) => records.push(TurnRecord {
                conversation: id,
                turn: 0,
                outcome: Err(RequestFailure::Internal(e.to_string())),
            }),
        }
    }
    shared.progress.finish();
    MultiTurnResult {
        records,
        duration: start.elapsed(),
    }
}

async fn one_conversation(
    shared: Arc<Shared>,
    script: ConversationScript,
    run_start: Instant,
) -> Vec<TurnRecord> {
    // The semaphore is never closed, so acquire fails only if that invariant breaks.
    let _slot = match shared.slots.acquire().await {
        Ok(permit) => permit,
        Err(e) => {
            return vec![TurnRecord {
                conversation: script.id,
                turn: 0,
                outcome: Err(RequestFailure::Internal(e.to_string())),
            }]
        }
    };
    let ctx = ConversationContext {
        target: &shared.target,
        think_time: shared.think_time,
        max_tokens: shared.max_tokens,
        run_start,
        progress: &shared.progress,
    };
    run_conversation(&ctx, &script).await
}
