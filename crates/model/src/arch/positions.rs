//! [`Positions`]: how a layer's attention sees token positions — rotary embeddings applied to
//! its queries and keys, or ALiBi biases the attention kernel adds to the scores (from the
//! absolute positions it already has, so the KV cache, prefix caching and chunked prefill
//! need nothing more).

use kestrel_kernels::cpu::attention::Alibi;

use super::naming::TensorNaming;
use crate::config::{ModelConfig, PositionEncoding};
use crate::layers::Rotary;

pub(crate) enum Positions {
    Rope(Rotary),
    Alibi(Alibi),
}

impl Positions {
    /// The encoding of `cfg`'s layer `layer` (Gemma's windowed layers have their own RoPE
    /// base); rotary pairing as `naming` stores the rows.
    pub fn of(cfg: &ModelConfig, layer: usize, naming: TensorNaming) -> Positions {
        match cfg.architecture.layout().positions {
            PositionEncoding::Rope => Positions::Rope(Rotary::for_layer(
                cfg,
                layer,
                naming.rope_style(cfg.architecture),
            )),
            PositionEncoding::Alibi(a) => Positions::Alibi(a),
        }
    }

    pub fn rotary(&self) -> Option<&Rotary> {
        match self {
            Positions::Rope(r) => Some(r),
            Positions::Alibi(_) => None,
        }
    }

    pub fn alibi(&self) -> Option<Alibi> {
        match self {
            Positions::Rope(_) => None,
            Positions::Alibi(a) => Some(*a),
        }
    }
}
