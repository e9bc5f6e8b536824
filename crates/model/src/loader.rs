//! [`load_model`]: open a GGUF file or an HF checkpoint directory and build everything needed
//! to run it — configuration, weights, tokenizer and chat template.

use std::path::{Path, PathBuf};

use crate::arch::{LlamaModel, TensorNaming};
use crate::chat_template::ChatTemplate;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::import::{ImportError, QuantizedCheckpoint};
use crate::quantize::in_situ::{OnTensor, QuantizingSource};
use crate::quantize::{QuantMethod, QuantOptions};
use crate::tokenizer::{GgufMetadata, Tokenizer};
use crate::weights::gguf::{GgufFile, MetaArray, MetaValue};
use crate::weights::safetensors::SafetensorsCheckpoint;
use crate::weights::TensorSource;

/// Which kind of file a model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    Gguf,
    Safetensors,
}

/// A model ready to run.
pub struct LoadedModel {
    pub path: PathBuf,
    pub format: ModelFormat,
    pub config: ModelConfig,
    pub model: LlamaModel,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<ChatTemplate>,
}

/// Load a `.gguf` file, or a directory with `config.json`, `*.safetensors` and `tokenizer.json`.
pub fn load_model(path: &Path) -> Result<LoadedModel, ModelError> {
    load_model_with(path, &LoadOptions::default())
}

/// How to load a model.
#[derive(Default)]
pub struct LoadOptions<'a> {
    /// Quantize the floating-point weights while loading (no calibration).
    pub quantize: Option<(QuantMethod, QuantOptions)>,
    /// Called after each tensor converted by `quantize`, with `(name, from, to)`.
    pub on_tensor: Option<OnTensor<'a>>,
}

/// [`load_model`] with options.
pub fn load_model_with(path: &Path, opts: &LoadOptions<'_>) -> Result<LoadedModel, ModelError> {
    let meta = std::fs::metadata(path).map_err(|e| ModelError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    if meta.is_dir() {
        load_hf_dir(path, opts)
    } else {
        load_gguf(path, opts)
    }
}

/// Build the model from `src`, through a [`QuantizingSource`] when asked to quantize.
fn build(
    config: &ModelConfig,
    src: &dyn TensorSource,
    naming: TensorNaming,
    opts: &LoadOptions<'_>,
) -> Result<LlamaModel, ModelError> {
    let Some((method, qopts)) = &opts.quantize else {
        return LlamaModel::load(config, src, naming);
    };
    let quantizing = QuantizingSource::new(src, naming, *method, qopts.clone(), opts.on_tensor)
        .map_err(|e| ModelError::Quantize(e.to_string()))?;
    LlamaModel::load(config, &quantizing, naming).map_err(|e| {
        match (e, quantizing.failures().first()) {
            (ModelError::MissingTensor(_), Some((name, reason))) => ModelError::BadTensor {
                name: name.clone(),
                reason: reason.clone(),
            },
            (e, _) => e,
        }
    })
}

fn load_gguf(path: &Path, opts: &LoadOptions<'_>) -> Result<LoadedModel, ModelError> {
    let file = GgufFile::open(path)?;
    let config = ModelConfig::from_gguf(&file)?;
    let model = build(&config, &file, TensorNaming::Gguf, opts)?;
    let tokenizer = Tokenizer::from_gguf_metadata(&file)?;
    let chat_template = template(&tokenizer)?;
    Ok(LoadedModel {
        path: path.into(),
        format: ModelFormat::Gguf,
        config,
        model,
        tokenizer,
        chat_template,
    })
}

fn load_hf_dir(dir: &Path, opts: &LoadOptions<'_>) -> Result<LoadedModel, ModelError> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| ModelError::Unreadable {
        path: config_path.display().to_string(),
        reason: e.to_string(),
    })?;
    let config = ModelConfig::from_hf_json(&text)?;
    let checkpoint = SafetensorsCheckpoint::open(dir)?;
    let model = match crate::import::quant_config(dir)? {
        None => build(&config, &checkpoint, TensorNaming::HuggingFace, opts)?,
        Some(_) if opts.quantize.is_some() => {
            return Err(ModelError::Quantize(format!(
                "{} is already quantized (AWQ/GPTQ)",
                dir.display()
            )))
        }
        Some(q) => load_quantized(&config, QuantizedCheckpoint::new(checkpoint, q))?,
    };
    let tok_config = dir.join("tokenizer_config.json");
    let tokenizer = Tokenizer::from_file(
        &dir.join("tokenizer.json"),
        tok_config.exists().then_some(tok_config.as_path()),
    )?;
    let chat_template = template(&tokenizer)?;
    Ok(LoadedModel {
        path: dir.into(),
        format: ModelFormat::Safetensors,
        config,
        model,
        tokenizer,
        chat_template,
    })
}

/// Load an AWQ/GPTQ checkpoint, reporting why a packed linear could not be read rather than
/// calling it missing.
fn load_quantized(
    config: &ModelConfig,
    src: QuantizedCheckpoint,
) -> Result<LlamaModel, ModelError> {
    LlamaModel::load(config, &src, TensorNaming::HuggingFace).map_err(|e| match e {
        ModelError::MissingTensor(name) => match src.failure(&name) {
            Some(reason) => ModelError::Import(ImportError::Linear { name, reason }),
            None => ModelError::MissingTensor(name),
        },
        other => other,
    })
}

fn template(tokenizer: &Tokenizer) -> Result<Option<ChatTemplate>, ModelError> {
    let Some(source) = tokenizer.chat_template() else {
        return Ok(None);
    };
    let (bos, eos) = (tokenizer.bos_token(), tokenizer.eos_token());
    ChatTemplate::new(source, bos.as_deref(), eos.as_deref())
        .map(Some)
        .map_err(|e| ModelError::ChatTemplate(e.to_string()))
}

impl GgufMetadata for GgufFile {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(MetaValue::as_str)
    }

    fn get_str_array(&self, key: &str) -> Option<Vec<&str>> {
        match self.get(key)?.as_array()? {
            MetaArray::String(v) => Some(v.iter().map(String::as_str).collect()),
            _ => None,
        }
    }

    fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key).and_then(MetaValue::as_u32)
    }

    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        match self.get(key)?.as_array()? {
            MetaArray::I32(v) => Some(v.clone()),
            _ => None,
        }
    }

    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        match self.get(key)?.as_array()? {
            MetaArray::F32(v) => Some(v.clone()),
            _ => None,
        }
    }

    fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(MetaValue::as_bool)
    }
}
