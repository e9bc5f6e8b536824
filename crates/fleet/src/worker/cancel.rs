//! Cancellations: the gateway publishes the id of a request whose client went away; the worker
//! running it drops its engine stream, which frees the request's KV blocks on the next engine
//! step. The subscription is re-made after a lost connection; what is missed meanwhile is found
//! by the upkeep's check of the cancellation markers.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::jobs::Jobs;
use super::WorkerShared;

/// Runs until `shared.stopping` is set.
pub async fn run(shared: Arc<WorkerShared>, jobs: Arc<Jobs>) {
    while !shared.is_stopping() {
        if let Err(e) = listen(&shared, &jobs).await {
            tracing::warn!(error = %e, "cancellation subscription lost; resubscribing");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn listen(shared: &WorkerShared, jobs: &Jobs) -> Result<(), redis::RedisError> {
    let mut pubsub = shared.redis.client().get_async_pubsub().await?;
    pubsub.subscribe(shared.keys.cancel_channel()).await?;
    let mut messages = pubsub.on_message();
    loop {
        let next = tokio::time::timeout(Duration::from_millis(500), messages.next()).await;
        if shared.is_stopping() {
            return Ok(());
        }
        match next {
            Err(_) => continue,
            Ok(None) => return Ok(()),
            Ok(Some(msg)) => {
                if let Ok(request) = msg.get_payload::<String>() {
                    jobs.cancel(&request);
                }
            }
        }
    }
}
