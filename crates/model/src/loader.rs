//! [`load_model`]: open a GGUF file or an HF checkpoint directory and build everything needed
//! to run it — configuration, weights, tokenizer and chat template.

use std::path::{Path, PathBuf};

use crate::arch::{LlamaModel, TensorNaming};
use crate::chat_template::ChatTemplate;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::tokenizer::{GgufMetadata, Tokenizer};
use crate::weights::gguf::{GgufFile, MetaArray, MetaValue};
use crate::weights::safetensors::SafetensorsCheckpoint;

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
    let meta = std::fs::metadata(path)
        .map_err(|e| ModelError::Unreadable { path: path.display().to_string(), reason: e.to_string() })?;
    if meta.is_dir() {
        load_hf_dir(path)
    } else {
        load_gguf(path)
    }
}

fn load_gguf(path: &Path) -> Result<LoadedModel, ModelError> {
    let file = GgufFile::open(path)?;
    let config = ModelConfig::from_gguf(&file)?;
    let model = LlamaModel::load(&config, &file, TensorNaming::Gguf)?;
    let tokenizer = Tokenizer::from_gguf_metadata(&file)?;
    let chat_template = template(&tokenizer)?;
    Ok(LoadedModel { path: path.into(), format: ModelFormat::Gguf, config, model, tokenizer, chat_template })
}

fn load_hf_dir(dir: &Path) -> Result<LoadedModel, ModelError> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path)
        .map_err(|e| ModelError::Unreadable { path: config_path.display().to_string(), reason: e.to_string() })?;
    let config = ModelConfig::from_hf_json(&text)?;
    let checkpoint = SafetensorsCheckpoint::open(dir)?;
    let model = LlamaModel::load(&config, &checkpoint, TensorNaming::HuggingFace)?;
    let tok_config = dir.join("tokenizer_config.json");
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"), tok_config.exists().then_some(tok_config.as_path()))?;
    let chat_template = template(&tokenizer)?;
    Ok(LoadedModel { path: dir.into(), format: ModelFormat::Safetensors, config, model, tokenizer, chat_template })
}

fn template(tokenizer: &Tokenizer) -> Result<Option<ChatTemplate>, ModelError> {
    let Some(source) = tokenizer.chat_template() else { return Ok(None) };
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
