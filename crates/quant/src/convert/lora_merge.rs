//! [`LoraMerge`]: a LoRA adapter folded into the weights it changes, `W' = W + scale · B · A`,
//! for `kestrel convert --merge-lora`. The adapter is fitted to the model in GGUF terms
//! (GGUF names, llama.cpp's Q/K row order), which both conversion directions pass through.

use std::path::Path;

use kestrel_model::arch::naming::TensorNaming;
use kestrel_model::config::ModelConfig;
use kestrel_model::lora::{LoraAdapter, LoraBase, LoraModule};
use kestrel_model::ModelError;

use super::ConvertError;

pub struct LoraMerge {
    adapter: LoraAdapter,
}

impl LoraMerge {
    /// Read the adapter at `path` (PEFT directory or llama.cpp LoRA GGUF) for the model of
    /// `config`.
    pub fn open(path: &Path, config: &ModelConfig) -> Result<LoraMerge, ConvertError> {
        let base = LoraBase::of(config, TensorNaming::Gguf);
        let adapter = LoraAdapter::open("merge", path, &base).map_err(ModelError::from)?;
        Ok(LoraMerge { adapter })
    }

    /// Add the delta of GGUF tensor `name` (if the adapter changes it) to its `values` (GGUF
    /// row order). Returns whether it did.
    pub fn apply(&self, name: &str, values: &mut [f32]) -> bool {
        let Some((layer, part)) = name
            .strip_prefix("blk.")
            .and_then(|r| r.strip_suffix(".weight"))
            .and_then(|r| r.split_once('.'))
        else {
            return false;
        };
        let (Ok(layer), Ok(LoraModule::Single(target))) =
            (layer.parse::<usize>(), LoraModule::from_gguf(part))
        else {
            return false;
        };
        let Some(pair) = self.adapter.pair(layer, target) else {
            return false;
        };
        let delta = pair.dense_delta();
        if delta.len() != values.len() {
            return false;
        }
        values.iter_mut().zip(&delta).for_each(|(v, d)| *v += d);
        true
    }

    /// How many projections the adapter changes.
    pub fn n_targets(&self) -> usize {
        self.adapter.targets().count()
    }
}
