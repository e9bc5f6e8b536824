//! LoRA adapters served beside one base model.
//!
//! * Formats: PEFT directories ([`peft`]) and llama.cpp adapter GGUFs ([`gguf_lora`]) are read
//!   into a [`RawLora`], then fitted to the base ([`LoraBase`]) as a [`LoraAdapter`]: one
//!   [`LoraPair`] (`ΔW = scale · B · A`, `f32`) per changed projection.
//! * Serving: adapters live in a [`LoraRegistry`] under an
//!   [`AdapterId`](kestrel_engine::adapter_id::AdapterId); each step's [`LoraBatch`] groups the
//!   batch's rows by adapter and adds each group's delta after the base projection, which
//!   runs once for all rows.

pub mod adapter;
pub mod base;
pub mod batch;
pub mod error;
pub mod gguf_lora;
pub mod pair;
pub mod peft;
pub mod raw;
pub mod registry;
pub mod target;

pub use adapter::LoraAdapter;
pub use base::LoraBase;
pub use batch::{LoraBatch, LoraSite};
pub use error::LoraError;
pub use pair::{LoraPair, LoraScratch};
pub use raw::{LoraSource, RawLora, RawPair};
pub use registry::LoraRegistry;
pub use target::{LoraModule, LoraTarget};
