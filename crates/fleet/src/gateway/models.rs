//! [`ServedModels`]: the routes of every model the gateway serves, by name, kept in step with
//! the fleet's bindings ([`crate::binding`]). For each bound name the gateway reads the
//! identity's descriptor, builds the model's tokenizer, template and limits from it, and
//! serves `kestrel serve`'s routes over a [`FleetBackend`] of that identity. When a name is
//! bound to another identity (its old workers all gone, a new one took it over), the name's
//! routes are rebuilt from the new descriptor; requests already queued keep following the
//! identity they were prepared for.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use kestrel_engine::constraint::ConstraintFactory;
use kestrel_server::{AppState, ServerConfig};
use metrics_exporter_prometheus::PrometheusHandle;

use super::backend::FleetBackend;
use super::GatewayShared;
use crate::identity::ModelIdentity;
use crate::protocol::ModelDescriptor;
use crate::redis_io::ensure_groups;
use crate::FleetError;

/// What a model's requests are prepared with.
pub struct ModelSlot {
    /// The model's descriptor, its identity included.
    pub descriptor: ModelDescriptor,
    /// Compiles structured-output grammars against the model, so a bad schema is a 400 at
    /// the gateway (`None`: the model's vocabulary cannot be constrained).
    pub constraints: Option<Arc<ConstraintFactory>>,
}

impl ModelSlot {
    /// The model's name and fingerprint.
    pub fn identity(&self) -> &ModelIdentity {
        &self.descriptor.identity
    }
}

/// A served model and its routes.
pub struct Served {
    pub slot: Arc<ModelSlot>,
    pub router: Router,
}

/// The served models by name.
#[derive(Default)]
pub struct ServedModels {
    by_name: RwLock<BTreeMap<String, Arc<Served>>>,
}

impl ServedModels {
    /// Every served model, in name order.
    pub fn all(&self) -> Vec<Arc<Served>> {
        self.read().values().cloned().collect()
    }

    /// The model served as `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Served>> {
        self.read().get(name).cloned()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Served>>> {
        // The map is replaced entry by entry; a panic elsewhere cannot leave it half-updated.
        self.by_name.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Served>>> {
        self.by_name.write().unwrap_or_else(|p| p.into_inner())
    }

    fn identity_of(&self, name: &str) -> Option<ModelIdentity> {
        self.read().get(name).map(|s| s.slot.identity().clone())
    }
}

/// Keeps the served models in step with the registry's bindings, until the task is dropped.
pub async fn keep_loaded(
    shared: Arc<GatewayShared>,
    http: ServerConfig,
    metrics: PrometheusHandle,
) {
    // Identities whose descriptor could not be used, so that each is logged once.
    let mut unusable: HashSet<ModelIdentity> = HashSet::new();
    loop {
        let bound = shared.registry.view().bound;
        let names: HashSet<&str> = bound.iter().map(|m| m.name.as_str()).collect();
        shared
            .models
            .write()
            .retain(|name, _| names.contains(name.as_str()));
        for identity in &bound {
            if shared.models.identity_of(&identity.name).as_ref() == Some(identity) {
                continue;
            }
            match load(&shared, &http, &metrics, identity).await {
                Ok(Some(served)) => {
                    tracing::info!(model = %identity, "serving the model");
                    unusable.remove(identity);
                    shared
                        .models
                        .write()
                        .insert(identity.name.clone(), Arc::new(served));
                }
                Ok(None) => {
                    if unusable.insert(identity.clone()) {
                        tracing::warn!(model = %identity, "no descriptor announced yet for the model");
                    }
                }
                Err(e) => {
                    if unusable.insert(identity.clone()) {
                        tracing::error!(model = %identity, error = %e, "the announced model is unusable");
                    }
                }
            }
        }
        let rebound = shared.registry.rebound.notified();
        let _ = tokio::time::timeout(Duration::from_millis(200), rebound).await;
    }
}

/// The routes of `identity`, from its descriptor (`None` while it has none in Redis).
async fn load(
    shared: &Arc<GatewayShared>,
    http: &ServerConfig,
    metrics: &PrometheusHandle,
    identity: &ModelIdentity,
) -> Result<Option<Served>, FleetError> {
    let Some(descriptor) = fetch_descriptor(shared, identity).await? else {
        return Ok(None);
    };
    if descriptor.identity != *identity {
        return Err(FleetError::Model(format!(
            "the descriptor stored for {identity} names {}",
            descriptor.identity
        )));
    }
    ensure_groups(&shared.redis, &shared.keys, identity).await?;
    let model = crate::descriptor::model_info(&descriptor)?;
    let limits = crate::descriptor::limits(&descriptor, &shared.config);
    let width = descriptor.request_limits.vocab_size;
    let constraints = kestrel_model::engine_builder::constraint_factory(&model.tokenizer, width);
    let slot = Arc::new(ModelSlot {
        descriptor,
        constraints,
    });
    let backend = Arc::new(FleetBackend::new(
        shared.clone(),
        Some(slot.clone()),
        tokio::runtime::Handle::current(),
    ));
    let state = AppState::new(backend, model, limits, metrics.clone());
    Ok(Some(Served {
        slot,
        router: kestrel_server::routes::router(http, state),
    }))
}

async fn fetch_descriptor(
    shared: &GatewayShared,
    identity: &ModelIdentity,
) -> Result<Option<ModelDescriptor>, FleetError> {
    let mut conn = shared.redis.conn();
    let json: Option<String> = redis::cmd("GET")
        .arg(shared.keys.model(identity))
        .query_async(&mut conn)
        .await?;
    json.map(|j| serde_json::from_str(&j).map_err(FleetError::from))
        .transpose()
}
