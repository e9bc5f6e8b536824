//! [`Keys`]: the names of everything the fleet keeps in Redis, in one place, and [`Band`], the
//! priority class a request is queued under.
//!
//! ```text
//! {p}:requests:{model}:{high,normal,low}  stream, consumer group `{p}-workers`: queued
//!                                         requests of one model identity
//! {p}:requests:{model}:worker:{id}:{band} stream, same group: requests routed to worker
//!                                         `id` (it holds their prefix); others take what
//!                                         waits there too long or outlives the worker
//! {p}:routed:{model}                      set: workers that have (or had) such streams
//! {p}:kv:{id}                             stream, trimmed: worker `id`'s prefix-cache events
//! {p}:models                              hash: served name -> fingerprint of the identity
//!                                         the fleet serves it as
//! {p}:model:{model}                       string: a model identity's descriptor (JSON)
//! {p}:results:{request}                   stream with a TTL: one request's events, in order
//! {p}:worker:{id}                         string with a TTL: a live worker's heartbeat (JSON)
//! {p}:cancel                              pub/sub channel: ids of requests whose client left
//! {p}:cancelled:{request}                 string with a TTL: the same, for workers that
//!                                         missed it
//! ```
//!
//! `{model}` is [`ModelIdentity::key`]: the escaped served name and the fingerprint's first
//! 16 hex digits, so each identity has its own queues and no worker can read another's.

use crate::identity::ModelIdentity;

/// A request's priority class: workers read `High` first, then `Normal`, then `Low`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Band {
    High,
    Normal,
    Low,
}

impl Band {
    /// Highest first.
    pub const ALL: [Band; 3] = [Band::High, Band::Normal, Band::Low];

    /// The band of a request's `priority` (lower runs first, as in vLLM; 0 is the default).
    pub fn of(priority: i32) -> Band {
        match priority {
            p if p < 0 => Band::High,
            0 => Band::Normal,
            _ => Band::Low,
        }
    }

    /// The label used in key names and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Band::High => "high",
            Band::Normal => "normal",
            Band::Low => "low",
        }
    }
}

/// Key names under one prefix (default `kestrel`), so several fleets can share a Redis.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Default for Keys {
    fn default() -> Self {
        Keys::new("kestrel")
    }
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// The request stream of `model`'s `band`.
    pub fn requests(&self, model: &ModelIdentity, band: Band) -> String {
        format!("{}:requests:{}:{}", self.prefix, model.key(), band.as_str())
    }

    /// The stream of `model`'s `band` routed to `worker` alone.
    pub fn worker_requests(&self, model: &ModelIdentity, worker: &str, band: Band) -> String {
        format!(
            "{}:requests:{}:worker:{worker}:{}",
            self.prefix,
            model.key(),
            band.as_str()
        )
    }

    /// The set of workers of `model` that have streams of their own.
    pub fn routed(&self, model: &ModelIdentity) -> String {
        format!("{}:routed:{}", self.prefix, model.key())
    }

    /// The stream of `worker`'s prefix-cache events.
    pub fn kv_events(&self, worker: &str) -> String {
        format!("{}:kv:{worker}", self.prefix)
    }

    /// The consumer group every worker reads the request streams through.
    pub fn group(&self) -> String {
        format!("{}-workers", self.prefix)
    }

    /// The result stream of `request`.
    pub fn results(&self, request: &str) -> String {
        format!("{}:results:{request}", self.prefix)
    }

    /// The heartbeat key of `worker`.
    pub fn worker(&self, worker: &str) -> String {
        format!("{}:worker:{worker}", self.prefix)
    }

    /// The pattern matching every heartbeat key.
    pub fn worker_pattern(&self) -> String {
        format!("{}:worker:*", self.prefix)
    }

    /// Which identity each served name is bound to (a hash: name -> fingerprint).
    pub fn bindings(&self) -> String {
        format!("{}:models", self.prefix)
    }

    /// The descriptor of `model`.
    pub fn model(&self, model: &ModelIdentity) -> String {
        format!("{}:model:{}", self.prefix, model.key())
    }

    /// The cancellation channel.
    pub fn cancel_channel(&self) -> String {
        format!("{}:cancel", self.prefix)
    }

    /// The cancellation marker of `request`.
    pub fn cancelled(&self, request: &str) -> String {
        format!("{}:cancelled:{request}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_follow_priority_order() {
        assert_eq!(Band::of(-5), Band::High);
        assert_eq!(Band::of(0), Band::Normal);
        assert_eq!(Band::of(1), Band::Low);
        assert_eq!(Band::ALL[0], Band::High);
    }

    #[test]
    fn keys_share_the_prefix() {
        let k = Keys::new("t1");
        let m = ModelIdentity {
            name: "smol".into(),
            fingerprint: "ab".repeat(32),
        };
        assert_eq!(
            k.requests(&m, Band::Low),
            "t1:requests:smol@abababababababab:low"
        );
        assert_eq!(k.model(&m), "t1:model:smol@abababababababab");
        assert_eq!(k.bindings(), "t1:models");
        assert_eq!(k.results("abc"), "t1:results:abc");
        assert_eq!(k.worker("w1"), "t1:worker:w1");
        assert!(k.worker_pattern().starts_with("t1:worker:"));
        assert_eq!(k.group(), "t1-workers");
        assert_eq!(
            k.worker_requests(&m, "w1", Band::High),
            "t1:requests:smol@abababababababab:worker:w1:high"
        );
        assert_eq!(k.routed(&m), "t1:routed:smol@abababababababab");
        assert_eq!(k.kv_events("w1"), "t1:kv:w1");
    }
}
