//! Kestrel's fleet: `kestrel gateway` (the HTTP front door, no weights) and `kestrel worker`
//! (a full engine) sharing work through Redis Streams.
//!
//! * [`identity`] — a served model's name plus the fingerprint of what decides its output;
//!   jobs carry it, and each identity has its own queues;
//! * [`binding`] — which identity each served name is bound to, and who is refused;
//! * [`keys`] — every Redis key and the priority [`keys::Band`]s;
//! * [`protocol`] — the JSON that travels: jobs, result entries, heartbeats, the model
//!   descriptor; [`pass`] — the answers to one-pass jobs (embeddings, prompt logprobs);
//! * [`worker`] — takes jobs through a consumer group, runs them, publishes results,
//!   acknowledges after the last one, claims dead workers' jobs;
//! * [`gateway`] — the server's routes over a [`gateway::FleetBackend`] that queues jobs and
//!   splices their results (re-runs included) into the client's stream;
//! * [`kv_events`] — the prefix-cache events workers publish, which the gateway's router
//!   indexes to send a request to the worker holding its prefix;
//! * [`redis_io`] — connections and retries.
//!
//! Delivery is at least once; a worker crash costs the client time, not tokens.

// Non-test code states its invariants instead of unwrapping (see the workspace's clippy lints).
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod binding;
pub mod descriptor;
pub mod gateway;
pub mod identity;
pub mod keys;
pub mod kv_events;
pub mod metrics;
pub mod pass;
pub mod protocol;
pub mod redis_io;
pub mod worker;

/// Why a fleet process failed.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("invalid redis URL {url:?}: {message}")]
    Url { url: String, message: String },
    #[error("cannot connect to redis at {url}: {source}")]
    Connect {
        url: String,
        source: redis::RedisError,
    },
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("malformed fleet data: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Model(String),
    #[error("the HTTP server failed: {0}")]
    Serve(String),
}
