//! [`load_model`] / [`load_model_with`]: `kestrel_model`'s loader, plus what needs this
//! crate — community AWQ/GPTQ checkpoint directories (read through
//! [`QuantizedCheckpoint`]) and quantizing a floating-point model while it loads
//! ([`LoadOptions::quantize`], through a [`QuantizingSource`]).
//!
//! The model crate's loader opens the files and reads the configuration and tokenizer; the
//! [`BuildModel`] here decides how the opened weights become the model.

use std::path::Path;

use kestrel_model::arch::{DecoderModel, TensorNaming};
use kestrel_model::config::ModelConfig;
use kestrel_model::weights::{FusedSplit, TensorSource};
use kestrel_model::{load_model_using, BuildModel, LoadedModel, ModelError, Weights};

use crate::import::{quant_config, ImportError, QuantizedCheckpoint};
use crate::quantize::in_situ::{OnTensor, QuantizingSource};
use crate::quantize::{QuantMethod, QuantOptions};

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error("quantizing while loading: {0}")]
    Quantize(String),
}

/// How to load a model.
#[derive(Default)]
pub struct LoadOptions<'a> {
    /// Quantize the floating-point weights while loading (no calibration).
    pub quantize: Option<(QuantMethod, QuantOptions)>,
    /// Called after each tensor converted by `quantize`, with `(name, from, to)`.
    pub on_tensor: Option<OnTensor<'a>>,
}

/// Load a `.gguf` file, or a directory with `config.json`, `*.safetensors` and `tokenizer.json`
/// (AWQ/GPTQ checkpoints included).
pub fn load_model(path: &Path) -> Result<LoadedModel, LoadError> {
    load_model_with(path, &LoadOptions::default())
}

/// [`load_model`] with options.
pub fn load_model_with(path: &Path, opts: &LoadOptions<'_>) -> Result<LoadedModel, LoadError> {
    load_model_using(path, opts)
}

impl BuildModel for LoadOptions<'_> {
    type Error = LoadError;

    fn build(&self, config: &ModelConfig, weights: Weights<'_>) -> Result<DecoderModel, LoadError> {
        let Weights::Safetensors { dir, checkpoint } = weights else {
            return build(config, weights.source(), weights.naming(), self);
        };
        match quant_config(dir)? {
            None => build(config, &checkpoint, TensorNaming::HuggingFace, self),
            Some(_) if self.quantize.is_some() => Err(LoadError::Quantize(format!(
                "{} is already quantized (AWQ/GPTQ)",
                dir.display()
            ))),
            Some(q) => load_quantized(config, QuantizedCheckpoint::new(checkpoint, q)),
        }
    }
}

/// Build the model from `src`, through a [`QuantizingSource`] when asked to quantize.
fn build(
    config: &ModelConfig,
    src: &dyn TensorSource,
    naming: TensorNaming,
    opts: &LoadOptions<'_>,
) -> Result<DecoderModel, LoadError> {
    let split = FusedSplit::new(src, config, naming);
    let src: &dyn TensorSource = &split;
    let Some((method, qopts)) = &opts.quantize else {
        return Ok(DecoderModel::load(config, src, naming)?);
    };
    let quantizing = QuantizingSource::new(src, naming, *method, qopts.clone(), opts.on_tensor)
        .map_err(|e| LoadError::Quantize(e.to_string()))?;
    DecoderModel::load(config, &quantizing, naming).map_err(|e| {
        LoadError::Model(match (e, quantizing.failures().first()) {
            (ModelError::MissingTensor(_), Some((name, reason))) => ModelError::BadTensor {
                name: name.clone(),
                reason: reason.clone(),
            },
            (e, _) => e,
        })
    })
}

/// Load an AWQ/GPTQ checkpoint, reporting why a packed linear could not be read rather than
/// calling it missing.
fn load_quantized(
    config: &ModelConfig,
    src: QuantizedCheckpoint,
) -> Result<DecoderModel, LoadError> {
    DecoderModel::load(config, &src, TensorNaming::HuggingFace).map_err(|e| match e {
        ModelError::MissingTensor(name) => match src.failure(&name) {
            Some(reason) => LoadError::Import(ImportError::Linear { name, reason }),
            None => LoadError::Model(ModelError::MissingTensor(name)),
        },
        other => LoadError::Model(other),
    })
}
