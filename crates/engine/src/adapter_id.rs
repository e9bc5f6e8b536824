//! [`AdapterId`]: names a LoRA adapter loaded beside the base model. The model side keeps the
//! adapters in a registry and resolves each sequence's id when it runs a batch; the engine only
//! carries the id with the request and keys its prefix cache by it.

/// A loaded adapter's id. Ids are never reused while the process runs, so a block cached under
/// an unloaded adapter can never be found by a later adapter that happens to take its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AdapterId(pub u32);

impl std::fmt::Display for AdapterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "adapter#{}", self.0)
    }
}
