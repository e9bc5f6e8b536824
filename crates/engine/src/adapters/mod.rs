//! LoRA adapters as the engine sees them. The executor holds the weights; the engine thread
//! owns the [`AdapterCatalog`]: every adapter registered by name (at start or at run time),
//! which of them are resident in the executor, and which requests use them.
//!
//! * [`AdapterCatalog`] — register / unregister by name, make an adapter resident for a
//!   request (loading it again after an eviction), evict the least recently used adapter
//!   that no live request uses.
//! * [`AdapterCard`] — what callers see of a registered adapter (`/v1/models`).
//! * [`LoraLimits`] — `--max-loras`, `--max-lora-rank`, `--max-cpu-loras`.
//! * [`AdapterError`] — why a load, an unload or a request's adapter was refused.

pub mod card;
pub mod catalog;
pub mod error;
pub mod limits;

pub use card::AdapterCard;
pub use catalog::AdapterCatalog;
pub use error::AdapterError;
pub use limits::LoraLimits;
