//! CPU-bound request work (tokenizing, rendering chat templates) off the async workers.
//!
//! Tokenizing a prompt takes time proportional to its length; run inline, a large prompt would
//! stall every other connection served by the same worker. [`run`] moves such work onto
//! tokio's blocking pool and turns a panic there into an internal error.

use crate::error::ApiError;

/// Runs `work` on the blocking pool and returns its result.
pub async fn run<T>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError>
where
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::Internal(format!("a blocking task failed: {e}")))?
}
