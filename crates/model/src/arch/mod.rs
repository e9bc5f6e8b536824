//! Architectures: configuration plus a forward pass over shared layers. The Llama family
//! (Llama, Mistral, Qwen2 — the latter adds QKV biases) shares one implementation.

pub mod llama;
pub mod naming;
pub mod workspace;

pub use llama::{ActivationObserver, AttnHeads, LinearSite, LlamaModel, Pass};
pub use naming::TensorNaming;
pub use workspace::Workspace;
