//! [`run_pass`]: a one-pass job at the gateway (an embedding or prompt logprobs). Queued on the
//! model's shared stream (a pass holds no KV cache after it, so there is no prefix to route
//! by), or under a LoRA adapter on the own stream of a worker serving it; its result stream is read until the one answer, a worker's refusal, or the fleet
//! giving up; the caller gets what `kestrel serve`'s backend would return.

use std::time::{Duration, Instant};

use kestrel_server::error::ApiError;
use redis::aio::MultiplexedConnection;

use super::relay::{cancel, enqueue, read, stranded};
use super::routing::Route;
use super::GatewayShared;
use crate::identity::ModelIdentity;
use crate::pass::PassResult;
use crate::protocol::{Job, ResultEvent};

/// How long Redis may stay unreachable before the pass fails.
const REDIS_PATIENCE: Duration = Duration::from_secs(30);
/// Longest one blocking read of the result stream waits.
const BLOCK: Duration = Duration::from_millis(1000);

/// Queues `job` (a one-pass kind) for `model` on `route` and waits for its answer.
pub async fn run_pass(
    shared: &GatewayShared,
    model: &ModelIdentity,
    job: Job,
    route: &Route,
) -> Result<PassResult, ApiError> {
    let request = job.id.clone();
    let answer = follow(shared, model, job, route).await;
    if answer.is_err() {
        cancel(shared, &request).await;
    }
    let mut conn = shared.redis.conn();
    let _ = redis::cmd("DEL")
        .arg(shared.keys.results(&request))
        .query_async::<()>(&mut conn)
        .await;
    answer
}

async fn follow(
    shared: &GatewayShared,
    model: &ModelIdentity,
    job: Job,
    route: &Route,
) -> Result<PassResult, ApiError> {
    let request = job.id.clone();
    enqueue(shared, model, &job, route)
        .await
        .map_err(|e| ApiError::Internal(format!("cannot queue the request: {e}")))?;
    let mut last_id = "0-0".to_string();
    let mut conn: Option<MultiplexedConnection> = None;
    let mut failing_since: Option<Instant> = None;
    loop {
        let read = match conn.as_mut() {
            Some(c) => read(shared, c, &request, &last_id).await,
            None => match shared.redis.dedicated(BLOCK).await {
                Ok(c) => {
                    conn = Some(c);
                    continue;
                }
                Err(e) => Err(e),
            },
        };
        let entries = match read {
            Ok(entries) => {
                failing_since = None;
                entries
            }
            Err(e) => {
                conn = None;
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > REDIS_PATIENCE {
                    return Err(ApiError::Internal(format!(
                        "lost the connection to the queue: {e}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if entries.is_empty() {
            if let Some(failure) = stranded(shared, model) {
                return Err(ApiError::Unavailable(failure.to_string()));
            }
            continue;
        }
        for (id, entry) in entries {
            last_id = id;
            match entry.event {
                ResultEvent::Pass(result) => return Ok(result),
                ResultEvent::Rejected { message } => {
                    return Err(ApiError::Internal(format!(
                        "the worker refused the request: {message}"
                    )))
                }
                ResultEvent::GaveUp { deliveries } => {
                    return Err(ApiError::Internal(format!(
                        "the request was delivered {deliveries} times and its worker failed \
                         each time; giving up"
                    )))
                }
                ResultEvent::Started { .. } => {}
                ResultEvent::Engine(_) => {
                    return Err(ApiError::Internal(
                        "a worker answered a one-pass job with a generation".into(),
                    ))
                }
            }
        }
    }
}
