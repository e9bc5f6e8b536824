//! Jobs a worker takes but cannot run, queued again for a worker that can ([`move_job`]):
//!
//! * a job for a model loaded on demand that has no room now (the process's other models are
//!   busy or pinned): back on the model's shared stream of its band, for any worker of the
//!   model (this one included, once it has room);
//! * a job for a LoRA adapter this worker does not serve, as below.
//!
//! A job for a LoRA adapter this worker does not serve. The gateway queues such a job only on
//! the own stream of a worker announcing the adapter; another worker meets it when it takes
//! over that worker's streams (the worker died, or left the entry waiting, see
//! [`super::orphans`]). Running it on the base model would answer with the wrong text, so the
//! job goes back to the queue instead:
//!
//! ```text
//! a live worker of the model announces the adapter ─► its own stream (least busy first)
//! none does, the job's queue time not yet spent     ─► back where it came from (taken over
//!                                                      again at the next heartbeat)
//! none does after the queue time                    ─► refused with a clear error
//! ```
//!
//! Moving a job is not a delivery: the new entry carries the deliveries so far
//! ([`Job::prior_deliveries`]), so the `--max-deliveries` rule counts runs wherever the job
//! goes. The new entry is added and the old one acknowledged and deleted in one transaction.

use std::time::Duration;

use redis::RedisError;

use super::jobs::Entry;
use crate::identity::ModelIdentity;
use crate::keys::{Band, Keys};
use crate::protocol::{unix_ms, Job, WorkerStatus, FIELD};
use crate::redis_io::Redis;

/// How long a job for an adapter no live worker serves waits when its request set no queue
/// time (the gateway's `--no-worker-timeout` default).
pub const DEFAULT_ADAPTER_WAIT: Duration = Duration::from_secs(30);

/// What became of a job whose adapter this worker lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requeued {
    /// Queued on the own stream of `worker`, which announces the adapter.
    Moved { worker: String },
    /// Queued again where it was: no live worker announces the adapter yet.
    Parked,
    /// No live worker announced the adapter within the job's queue time: refuse it.
    Expired { waited: Duration },
}

/// Where the job for adapter `adapter` taken from `entry` by `me` goes (see the module docs),
/// `attempt` being its deliveries so far, this one included.
pub struct Requeue<'a> {
    pub redis: &'a Redis,
    pub keys: &'a Keys,
    pub me: &'a str,
    pub model: &'a ModelIdentity,
    /// The wait for a job whose request set no queue time.
    pub default_wait: Duration,
}

impl Requeue<'_> {
    /// Moves, parks or expires `job` (whose adapter is `adapter`) taken from `entry`.
    pub async fn run(
        &self,
        entry: &Entry,
        job: &Job,
        adapter: &str,
        attempt: u32,
    ) -> Result<Requeued, RedisError> {
        let live = crate::binding::live_workers(self.redis, self.keys).await?;
        let target = pick(&live, self.model, adapter, self.me);
        let waited = Duration::from_millis(unix_ms().saturating_sub(job.queued_at_ms));
        let limit = job
            .max_queue_time_ms
            .map_or(self.default_wait, Duration::from_millis);
        let (stream, outcome) = match target {
            Some(worker) => (
                self.keys
                    .worker_requests(self.model, &worker, Band::of(job.priority)),
                Requeued::Moved { worker },
            ),
            None if waited >= limit => return Ok(Requeued::Expired { waited }),
            None => (entry.stream.clone(), Requeued::Parked),
        };
        move_job(self.redis, self.keys, entry, job, attempt, &stream).await?;
        Ok(outcome)
    }
}

/// Queues `job` (taken from `entry`, `attempt` its deliveries so far, this one included) on
/// `stream`, and acknowledges and deletes `entry`, in one transaction. The new entry carries
/// the deliveries so far but this one, which did not run it.
pub async fn move_job(
    redis: &Redis,
    keys: &Keys,
    entry: &Entry,
    job: &Job,
    attempt: u32,
    stream: &str,
) -> Result<(), RedisError> {
    let moved = Job {
        prior_deliveries: attempt.saturating_sub(1),
        ..job.clone()
    };
    let json = serde_json::to_string(&moved).unwrap_or_default();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg(FIELD)
        .arg(json)
        .ignore()
        .cmd("XACK")
        .arg(&entry.stream)
        .arg(keys.group())
        .arg(&entry.id)
        .ignore()
        .cmd("XDEL")
        .arg(&entry.stream)
        .arg(&entry.id)
        .ignore();
    pipe.query_async::<()>(&mut redis.conn()).await
}

/// The least busy live worker of `model` other than `me` that announces `adapter`.
fn pick(live: &[WorkerStatus], model: &ModelIdentity, adapter: &str, me: &str) -> Option<String> {
    live.iter()
        .filter(|w| &w.model == model && w.worker_id != me)
        .filter(|w| w.adapters.iter().any(|a| a.name == adapter))
        .min_by_key(|w| (w.active, w.worker_id.clone()))
        .map(|w| w.worker_id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::AnnouncedAdapter;

    fn status(id: &str, model: &ModelIdentity, active: usize, adapters: &[&str]) -> WorkerStatus {
        WorkerStatus {
            worker_id: id.into(),
            model: model.clone(),
            max_num_seqs: 4,
            active,
            running: 0,
            waiting: 0,
            kv_usage: 0.0,
            prefix_block_size: None,
            adapters: adapters
                .iter()
                .map(|name| AnnouncedAdapter {
                    name: (*name).into(),
                    path: "/a".into(),
                    rank: 8,
                })
                .collect(),
            state: None,
        }
    }

    #[test]
    fn the_least_busy_other_worker_of_the_model_with_the_adapter_is_picked() {
        let tiny = ModelIdentity {
            name: "tiny".into(),
            fingerprint: "aa".into(),
        };
        let other = ModelIdentity {
            name: "tiny".into(),
            fingerprint: "bb".into(),
        };
        let live = vec![
            status("me", &tiny, 0, &["all7"]),
            status("busy", &tiny, 3, &["all7"]),
            status("idle", &tiny, 1, &["all7"]),
            status("plain", &tiny, 0, &[]),
            status("foreign", &other, 0, &["all7"]),
        ];
        assert_eq!(pick(&live, &tiny, "all7", "me"), Some("idle".into()));
        assert_eq!(pick(&live, &tiny, "other", "me"), None);
        assert_eq!(pick(&live[..1], &tiny, "all7", "me"), None, "never itself");
    }
}
