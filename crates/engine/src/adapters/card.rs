//! [`AdapterCard`]: a registered LoRA adapter as callers see it.

use std::path::PathBuf;

use crate::adapter_id::AdapterId;

/// One registered adapter: its id, the name requests use, where it was read from, its rank
/// and whether its weights are resident in the executor now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterCard {
    pub id: AdapterId,
    pub name: String,
    pub path: PathBuf,
    /// The largest rank of its deltas.
    pub rank: usize,
    /// Loaded in the executor (an evicted adapter is loaded again when a request needs it).
    pub resident: bool,
}
