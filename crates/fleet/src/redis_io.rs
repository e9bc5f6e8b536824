//! Connections to Redis: a shared, self-reconnecting [`ConnectionManager`] for ordinary commands,
//! and dedicated connections for blocking reads (`XREAD`/`XREADGROUP ... BLOCK`), which would
//! stall every other command sharing their connection.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, RedisError};

use crate::FleetError;

/// How long an ordinary command may take before it counts as failed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// A Redis server: its client and one shared connection.
#[derive(Clone)]
pub struct Redis {
    client: Client,
    shared: ConnectionManager,
}

impl Redis {
    /// Connects to `url` (`redis://host:port[/db]`), retrying for up to `patience`.
    pub async fn connect(url: &str, patience: Duration) -> Result<Redis, FleetError> {
        let client = Client::open(url).map_err(|e| FleetError::Url {
            url: url.to_string(),
            message: e.to_string(),
        })?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2);
        let shared = retry_for(patience, || {
            ConnectionManager::new_with_config(client.clone(), config.clone())
        })
        .await
        .map_err(|source| FleetError::Connect {
            url: url.to_string(),
            source,
        })?;
        Ok(Redis { client, shared })
    }

    /// The shared connection (cheap to clone; reconnects by itself after a failure).
    pub fn conn(&self) -> ConnectionManager {
        self.shared.clone()
    }

    /// A new connection of its own, for blocking reads of up to `block` each.
    pub async fn dedicated(&self, block: Duration) -> Result<MultiplexedConnection, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(block + COMMAND_TIMEOUT))
            .set_connection_timeout(Some(Duration::from_secs(2)));
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// The blocking-read connection in `slot`, opened first when the slot is empty. When Redis
    /// cannot be reached it logs that `purpose` waits, pauses half a second and returns `None`:
    /// the caller's loop tries again.
    pub async fn dedicated_in<'a>(
        &self,
        slot: &'a mut Option<MultiplexedConnection>,
        block: Duration,
        purpose: &str,
    ) -> Option<&'a mut MultiplexedConnection> {
        if slot.is_none() {
            match self.dedicated(block).await {
                Ok(c) => *slot = Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach redis for {purpose}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    return None;
                }
            }
        }
        slot.as_mut()
    }

    /// The client, for pub/sub.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// Runs `op` until it succeeds or `patience` has passed (then returns its last error), backing
/// off from 50 ms to 1 s between tries.
pub async fn retry_for<T, F, Fut>(patience: Duration, mut op: F) -> Result<T, RedisError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RedisError>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() >= patience => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "redis command failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Creates the consumer group on every request stream of `model` (and the streams), if
/// missing.
pub async fn ensure_groups(
    redis: &Redis,
    keys: &crate::keys::Keys,
    model: &crate::identity::ModelIdentity,
) -> Result<(), RedisError> {
    for band in crate::keys::Band::ALL {
        ensure_group(redis, keys, &keys.requests(model, band)).await?;
    }
    Ok(())
}

/// Creates the consumer group on `stream` (and the stream), if missing.
pub async fn ensure_group(
    redis: &Redis,
    keys: &crate::keys::Keys,
    stream: &str,
) -> Result<(), RedisError> {
    let mut conn = redis.conn();
    let created: Result<(), RedisError> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(keys.group())
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await;
    match created {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        Err(e) => Err(e),
    }
}
