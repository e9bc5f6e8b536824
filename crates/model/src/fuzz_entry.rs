//! Entry points for the fuzz targets in `fuzz/` and for the test that replays their corpora:
//! each takes raw bytes, runs them through the same parsing a model load does (from memory, no
//! files), and returns what it returned. Every input must come back as `Ok` or a typed error:
//! a panic, a hang or a huge allocation is a bug in the parser, not in the caller.

use kestrel_kernels::SharedBytes;

use crate::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
use crate::config::{ConfigError, ModelConfig};
use crate::tokenizer::{Tokenizer, TokenizerError};
use crate::weights::gguf::GgufFile;
use crate::weights::safetensors::{SafetensorsCheckpoint, SafetensorsError};
use crate::weights::TensorSource;
use crate::ModelError;

/// Text every loaded tokenizer encodes and decodes back.
const SAMPLE_TEXT: &str = "Hello, world! <|im_start|>user\n12345 ünïcödé\t<s></s>";

/// Separates the messages (a JSON line) from the template source in a `chat_template` input.
pub const CHAT_SEPARATOR: u8 = b'\n';

/// A GGUF file: header, metadata, tensor infos, every tensor's bytes, then the model config,
/// the tokenizer and the chat template it describes (everything a load reads before weights).
pub fn gguf(data: &[u8]) -> Result<(), ModelError> {
    let file = GgufFile::from_bytes(SharedBytes::from_vec(data.to_vec()))?;
    for info in file.tensors() {
        // Validated at open: a tensor that cannot be sliced is a reader bug, so fail loudly.
        let data = file.tensor_data(info);
        assert!(data.is_some_and(|d| d.len() as u64 == info.size_bytes));
    }
    let config = ModelConfig::from_gguf(&file);
    let tokenizer = Tokenizer::from_gguf_metadata(&file);
    if let Ok(tokenizer) = &tokenizer {
        exercise_tokenizer(tokenizer)?;
        crate::loader::template(tokenizer)?;
    }
    config?;
    tokenizer?;
    Ok(())
}

/// A single `.safetensors` file: header and every tensor's bytes.
pub fn safetensors(data: &[u8]) -> Result<(), SafetensorsError> {
    let checkpoint = SafetensorsCheckpoint::from_bytes(SharedBytes::from_vec(data.to_vec()))?;
    for name in checkpoint.raw_tensor_names() {
        let _ = checkpoint.raw_tensor(&name);
        let _ = checkpoint.tensor(&name);
    }
    Ok(())
}

/// A Hugging Face `config.json`.
pub fn hf_config(data: &[u8]) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_hf_json(&String::from_utf8_lossy(data))
}

/// A Hugging Face `tokenizer.json`; once loaded, a sample text is encoded and decoded.
pub fn tokenizer_json(data: &[u8]) -> Result<(), TokenizerError> {
    let tokenizer = Tokenizer::from_json_text(&String::from_utf8_lossy(data), None)?;
    exercise_tokenizer(&tokenizer)
}

/// A chat template and the messages to render with it: the first line is the messages as a
/// JSON array (a fixed conversation when it does not parse), the rest is the template source.
/// Rendered without and with the generation prompt.
pub fn chat_template(data: &[u8]) -> Result<(), ChatTemplateError> {
    let text = String::from_utf8_lossy(data);
    let (first, source) = text
        .split_once(CHAT_SEPARATOR as char)
        .unwrap_or(("", text.as_ref()));
    let messages: Vec<ChatMessage> =
        serde_json::from_str(first).unwrap_or_else(|_| default_messages());
    let template = ChatTemplate::new(source, Some("<s>"), Some("</s>"))?;
    template.render(&messages, false)?;
    template.render(&messages, true)?;
    Ok(())
}

fn default_messages() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello!"),
        ChatMessage::new("user", "What is 2+2?"),
    ]
}

fn exercise_tokenizer(tokenizer: &Tokenizer) -> Result<(), TokenizerError> {
    let ids = tokenizer.encode(SAMPLE_TEXT, true)?;
    let _ = tokenizer.decode(&ids, false);
    let _ = tokenizer.decode(&ids, true);
    Ok(())
}
