//! Architectures: configuration plus a forward pass over shared layers. Every supported family
//! runs on one [`DecoderModel`], built from per-feature blocks (norm kind, position encoding,
//! MLP kind and fused QKV follow [`crate::config::BlockLayout`]).

pub(crate) mod attention_block;
pub mod decoder;
pub mod decoder_dims;
pub(crate) mod feed_forward;
pub(crate) mod fused_experts;
pub(crate) mod fused_qkv;
pub mod latent_attention;
pub mod latent_prefill;
pub(crate) mod mlp;
pub mod moe_block;
pub mod moe_naming;
pub mod naming;
pub mod observer;
pub mod pass;
pub(crate) mod positions;
pub mod router;
pub(crate) mod rows;
pub(crate) mod tensor_loader;
pub mod workspace;

pub use decoder::DecoderModel;
pub use decoder_dims::DecoderDims;
pub use naming::TensorNaming;
pub use observer::{ActivationObserver, AttnHeads, LinearSite};
pub use pass::Pass;
pub use workspace::Workspace;
