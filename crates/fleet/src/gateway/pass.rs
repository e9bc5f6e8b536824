//! [`run_pass`]: a one-pass job at the gateway (an embedding or prompt logprobs). Queued on the
//! model's shared stream (a pass holds no KV cache after it, so there is no prefix to route
//! by), or under a LoRA adapter on the own stream of a worker serving it; its result stream is read until the one answer, a worker's refusal, or the fleet
//! giving up; the caller gets what `kestrel serve`'s backend would return.

use kestrel_server::error::ApiError;

use super::relay::{cancel, enqueue, stranded, ResultReader};
use super::routing::Route;
use super::GatewayShared;
use crate::identity::ModelIdentity;
use crate::pass::PassResult;
use crate::protocol::{Job, ResultEvent};

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
    let mut reader = ResultReader::new(shared, &request);
    loop {
        let entries = match reader.next().await {
            Ok(entries) => entries,
            Err(e) => {
                return Err(ApiError::Internal(format!(
                    "lost the connection to the queue: {e}"
                )));
            }
        };
        if entries.is_empty() {
            if let Some(failure) = stranded(shared, model) {
                return Err(ApiError::Unavailable(failure.to_string()));
            }
            continue;
        }
        for entry in entries {
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
