//! The limits on the models one process holds at once, shared by `kestrel serve` and
//! `kestrel worker` of several models (both hand them to a
//! [`kestrel_server::model_registry::ModelRegistry`]).

/// How many models, and how much of them, one process keeps loaded.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ModelLimitArgs {
    /// With several models: most loaded at once. Loading another unloads the least recently
    /// used idle one; --kv-cache-memory is shared out evenly between this many engines
    /// [default: 2 on `serve`; on `worker`, every model, all loaded at start].
    #[arg(long, value_name = "N")]
    pub max_loaded_models: Option<usize>,
    /// With several models: never unload the model NAME (repeatable).
    #[arg(long, value_name = "NAME")]
    pub pin: Vec<String>,
    /// With several models: most memory the loaded models may take, e.g. 4GiB, estimated for
    /// each model as its weights file(s) plus its share of --kv-cache-memory. Loading another
    /// unloads least recently used idle models until it fits.
    #[arg(long, value_name = "SIZE", value_parser = crate::engine_args::parse_bytes)]
    pub models_memory_budget: Option<u64>,
}

impl ModelLimitArgs {
    /// Whether any limit is given.
    pub fn any(&self) -> bool {
        self.max_loaded_models.is_some()
            || !self.pin.is_empty()
            || self.models_memory_budget.is_some()
    }
}
