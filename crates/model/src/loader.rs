//! [`load_model`]: open a GGUF file or an HF checkpoint directory and build everything needed
//! to run it — configuration, weights, tokenizer and chat template.
//!
//! [`load_model_using`] lets a caller decide how the opened [`Weights`] become a
//! [`DecoderModel`] (a [`BuildModel`]); the offline toolkit uses it to quantize while loading
//! and to read AWQ/GPTQ checkpoints. [`load_model`] builds from the weights as stored
//! ([`AsStored`]).

use std::path::{Path, PathBuf};

use crate::arch::{DecoderModel, TensorNaming};
use crate::chat_template::ChatTemplate;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::tokenizer::{GgufMetadata, Tokenizer};
use crate::weights::gguf::{GgufFile, MetaArray, MetaValue};
use crate::weights::safetensors::SafetensorsCheckpoint;
use crate::weights::{FusedSplit, TensorSource};

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
    pub model: DecoderModel,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<ChatTemplate>,
}

impl LoadedModel {
    /// Serves chat with `source` (Jinja) instead of the model's own template: the tokenizer
    /// carries it too, so everything that reads the template agrees. A template that does not
    /// compile is refused here, before anything serves.
    pub fn set_chat_template(&mut self, source: impl Into<String>) -> Result<(), ModelError> {
        self.tokenizer.set_chat_template(source);
        self.chat_template = template(&self.tokenizer)?;
        Ok(())
    }
}

/// The weights of a model file, opened, before the model is built from them.
pub enum Weights<'a> {
    /// A GGUF file (GGUF tensor names).
    Gguf(&'a GgufFile),
    /// The safetensors of an HF checkpoint directory (HF tensor names).
    Safetensors {
        dir: &'a Path,
        checkpoint: SafetensorsCheckpoint,
    },
}

impl Weights<'_> {
    /// The tensors, as stored.
    pub fn source(&self) -> &dyn TensorSource {
        match self {
            Weights::Gguf(file) => *file,
            Weights::Safetensors { checkpoint, .. } => checkpoint,
        }
    }

    /// How the tensors are named.
    pub fn naming(&self) -> TensorNaming {
        match self {
            Weights::Gguf(_) => TensorNaming::Gguf,
            Weights::Safetensors { .. } => TensorNaming::HuggingFace,
        }
    }
}

/// How [`load_model_using`] turns the opened weights into a [`DecoderModel`].
pub trait BuildModel {
    /// The error of a load: [`ModelError`] or a wider type that holds it.
    type Error: From<ModelError>;

    fn build(
        &self,
        config: &ModelConfig,
        weights: Weights<'_>,
    ) -> Result<DecoderModel, Self::Error>;
}

/// Builds the model from the tensors as stored.
#[derive(Debug, Clone, Copy, Default)]
pub struct AsStored;

impl BuildModel for AsStored {
    type Error = ModelError;

    fn build(
        &self,
        config: &ModelConfig,
        weights: Weights<'_>,
    ) -> Result<DecoderModel, ModelError> {
        let naming = weights.naming();
        let split = FusedSplit::new(weights.source(), config, naming);
        DecoderModel::load(config, &split, naming)
    }
}

/// Load a `.gguf` file, or a directory with `config.json`, `*.safetensors` and `tokenizer.json`,
/// with the weights as stored. (AWQ/GPTQ checkpoints and quantizing while loading:
/// `kestrel_quant::load_model_with`.)
pub fn load_model(path: &Path) -> Result<LoadedModel, ModelError> {
    load_model_using(path, &AsStored)
}

/// [`load_model`], building the model with `builder`.
pub fn load_model_using<B: BuildModel>(path: &Path, builder: &B) -> Result<LoadedModel, B::Error> {
    let meta = std::fs::metadata(path).map_err(|e| ModelError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    if meta.is_dir() {
        load_hf_dir(path, builder)
    } else {
        load_gguf(path, builder)
    }
}

fn load_gguf<B: BuildModel>(path: &Path, builder: &B) -> Result<LoadedModel, B::Error> {
    let file = GgufFile::open(path).map_err(ModelError::from)?;
    let config = ModelConfig::from_gguf(&file).map_err(ModelError::from)?;
    let model = builder.build(&config, Weights::Gguf(&file))?;
    let mut tokenizer = Tokenizer::from_gguf_metadata(&file).map_err(ModelError::from)?;
    default_to_family_template(&mut tokenizer, &config);
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

fn load_hf_dir<B: BuildModel>(dir: &Path, builder: &B) -> Result<LoadedModel, B::Error> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| ModelError::Unreadable {
        path: config_path.display().to_string(),
        reason: e.to_string(),
    })?;
    let config = ModelConfig::from_hf_json(&text).map_err(ModelError::from)?;
    let checkpoint = SafetensorsCheckpoint::open(dir).map_err(ModelError::from)?;
    let model = builder.build(&config, Weights::Safetensors { dir, checkpoint })?;
    let tok_config = dir.join("tokenizer_config.json");
    let mut tokenizer = Tokenizer::from_file(
        &dir.join("tokenizer.json"),
        tok_config.exists().then_some(tok_config.as_path()),
    )
    .map_err(ModelError::from)?;
    default_to_family_template(&mut tokenizer, &config);
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

/// A model file without a chat template gets its family's built-in one, where the family has
/// one (as llama-server does); the tokenizer then carries it, so every consumer (the fleet's
/// gateway included) sees the template the engine uses.
fn default_to_family_template(tokenizer: &mut Tokenizer, config: &ModelConfig) {
    if tokenizer.chat_template().is_none() {
        if let Some(source) = config.architecture.builtin_chat_template() {
            tokenizer.set_chat_template(source);
        }
    }
}

/// The chat template `tokenizer` carries, compiled with its BOS/EOS text (`None` without one).
pub fn template(tokenizer: &Tokenizer) -> Result<Option<ChatTemplate>, ModelError> {
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
