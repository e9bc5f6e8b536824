//! Architectures: configuration plus a forward pass over shared layers. Every supported family
//! runs on one [`DecoderModel`], built from per-feature blocks.

pub(crate) mod attention_block;
pub mod decoder;
pub(crate) mod feed_forward;
pub(crate) mod mlp;
pub mod moe_block;
pub mod moe_naming;
pub mod naming;
pub mod observer;
pub mod router;
pub(crate) mod tensor_loader;
pub mod workspace;

pub use decoder::{DecoderDims, DecoderModel, Pass};
pub use naming::TensorNaming;
pub use observer::{ActivationObserver, AttnHeads, LinearSite};
pub use workspace::Workspace;
