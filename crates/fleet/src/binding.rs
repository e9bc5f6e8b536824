//! Which identity the fleet serves each name as. The binding lives in Redis (the hash
//! [`Keys::bindings`]: served name -> fingerprint), so every gateway replica agrees on it:
//!
//! * the first worker to announce a name binds it to its identity;
//! * a worker announcing a bound name with another fingerprint is refused while a worker of
//!   the bound identity is alive: it reads only its own identity's queues, where no gateway
//!   queues anything, so it takes no job; the gateway reports it (log, metric, `/health`);
//! * once no worker of the bound identity is alive, the next worker to announce the name
//!   takes it over (a redeploy onto other weights): gateways then serve the name as the new
//!   identity. Requests still queued for the old one fail after the gateway's
//!   `--no-worker-timeout`, never running on the new weights.
//!
//! The take-over is a compare-and-set in one Lua script, so two newcomers racing for an
//! orphaned name cannot both win.

use std::collections::HashMap;

use redis::RedisError;

use crate::identity::ModelIdentity;
use crate::keys::Keys;
use crate::protocol::WorkerStatus;
use crate::redis_io::Redis;

/// Binds `ARGV[1]` to `ARGV[2]` when it is unbound, or bound to `ARGV[3]` (when given);
/// returns the fingerprint bound afterwards.
const BIND: &str = r"
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (not cur) or (ARGV[3] ~= '' and cur == ARGV[3]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return ARGV[2]
end
return cur
";

/// What announcing a name came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The name is served as this worker's identity.
    Bound,
    /// It was bound to `from`, which had no live worker; now it is ours.
    TookOver { from: String },
    /// It stays bound to `holder`, served by `live` live workers.
    Refused { holder: ModelIdentity, live: usize },
}

/// Announces `me`'s name, binding it to `me` where the rules above allow.
pub async fn claim(redis: &Redis, keys: &Keys, me: &ModelIdentity) -> Result<Claim, RedisError> {
    let bound = bind(redis, keys, me, "").await?;
    if bound == me.fingerprint {
        return Ok(Claim::Bound);
    }
    let holder = ModelIdentity {
        name: me.name.clone(),
        fingerprint: bound,
    };
    let live = live_workers(redis, keys)
        .await?
        .iter()
        .filter(|w| w.model == holder)
        .count();
    if live > 0 {
        return Ok(Claim::Refused { holder, live });
    }
    let now = bind(redis, keys, me, &holder.fingerprint).await?;
    if now == me.fingerprint {
        return Ok(Claim::TookOver {
            from: holder.fingerprint,
        });
    }
    // Another newcomer took it first.
    Ok(Claim::Refused {
        holder: ModelIdentity {
            name: me.name.clone(),
            fingerprint: now,
        },
        live: 0,
    })
}

async fn bind(
    redis: &Redis,
    keys: &Keys,
    me: &ModelIdentity,
    replacing: &str,
) -> Result<String, RedisError> {
    let mut conn = redis.conn();
    redis::cmd("EVAL")
        .arg(BIND)
        .arg(1)
        .arg(keys.bindings())
        .arg(&me.name)
        .arg(&me.fingerprint)
        .arg(replacing)
        .query_async(&mut conn)
        .await
}

/// Every served name with the identity it is bound to.
pub async fn bindings(redis: &Redis, keys: &Keys) -> Result<Vec<ModelIdentity>, RedisError> {
    let mut conn = redis.conn();
    let map: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(keys.bindings())
        .query_async(&mut conn)
        .await?;
    let mut models: Vec<ModelIdentity> = map
        .into_iter()
        .map(|(name, fingerprint)| ModelIdentity { name, fingerprint })
        .collect();
    models.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(models)
}

/// The heartbeats of every live worker (undecodable ones, of other versions, are skipped).
pub async fn live_workers(redis: &Redis, keys: &Keys) -> Result<Vec<WorkerStatus>, RedisError> {
    let mut conn = redis.conn();
    let mut names: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(keys.worker_pattern())
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        names.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&names)
        .query_async(&mut conn)
        .await?;
    Ok(values
        .into_iter()
        .flatten()
        .filter_map(|json| serde_json::from_str::<WorkerStatus>(&json).ok())
        .collect())
}
