//! GGUF tokenizer metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`) from an HF
//! `tokenizer.json` and `tokenizer_config.json`. Byte-level BPE tokenizers only (`gpt2` in
//! GGUF terms); the split regex family becomes `tokenizer.ggml.pre`.

use std::path::Path;

use kestrel_model::config::ModelConfig;
use kestrel_model::tokenizer::keys;
use kestrel_model::weights::gguf::{MetaArray, MetaValue};
use serde_json::Value;

use super::ConvertError;

/// llama.cpp token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

fn read_json(path: &Path) -> Result<Value, ConvertError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConvertError::io(path, e))?;
    Ok(serde_json::from_str(&text)?)
}

fn bad(msg: impl Into<String>) -> ConvertError {
    ConvertError::Tokenizer(msg.into())
}

/// The tokenizer metadata of the checkpoint in `dir`.
pub(crate) fn from_hf_dir(
    dir: &Path,
    config: &ModelConfig,
) -> Result<Vec<(String, MetaValue)>, ConvertError> {
    let tok = read_json(&dir.join("tokenizer.json"))?;
    let cfg_path = dir.join("tokenizer_config.json");
    let tcfg = if cfg_path.exists() {
        read_json(&cfg_path)?
    } else {
        Value::Null
    };
    let model = &tok["model"];
    if model["type"].as_str() != Some("BPE") || model["byte_fallback"].as_bool() == Some(true) {
        return Err(bad(
            "only byte-level BPE tokenizers (GGUF `gpt2`) can be converted",
        ));
    }
    let (tokens, types) = vocabulary(&tok, config.vocab_size)?;
    let id_of = |v: &Value| {
        token_text(v)
            .and_then(|t| tokens.iter().position(|x| *x == t))
            .map(|i| i as u32)
    };
    let mut m = vec![
        (keys::MODEL.to_string(), MetaValue::String("gpt2".into())),
        (
            keys::PRE.to_string(),
            MetaValue::String(pre_name(&tok["pre_tokenizer"])?.into()),
        ),
        (
            keys::TOKENS.to_string(),
            MetaValue::Array(MetaArray::String(tokens.clone())),
        ),
        (
            keys::TOKEN_TYPE.to_string(),
            MetaValue::Array(MetaArray::I32(types)),
        ),
        (
            keys::MERGES.to_string(),
            MetaValue::Array(MetaArray::String(merges(&model["merges"])?)),
        ),
    ];
    let bos = id_of(&tcfg["bos_token"]).or(config.bos_token_id);
    let eos = id_of(&tcfg["eos_token"]).or(config.eos_token_ids.first().copied());
    for (key, id) in [
        (keys::BOS_ID, bos),
        (keys::EOS_ID, eos),
        (keys::UNK_ID, id_of(&tcfg["unk_token"])),
    ] {
        if let Some(id) = id {
            m.push((key.to_string(), MetaValue::U32(id)));
        }
    }
    let add_bos = tcfg["add_bos_token"]
        .as_bool()
        .unwrap_or_else(|| post_processor_adds_bos(&tok["post_processor"]));
    m.push((keys::ADD_BOS.to_string(), MetaValue::Bool(add_bos)));
    m.push((
        keys::ADD_EOS.to_string(),
        MetaValue::Bool(tcfg["add_eos_token"].as_bool().unwrap_or(false)),
    ));
    if let Some(t) = tcfg["chat_template"].as_str() {
        m.push((
            keys::CHAT_TEMPLATE.to_string(),
            MetaValue::String(t.to_string()),
        ));
    }
    Ok(m)
}

/// Tokens by id (model vocabulary plus added tokens, padded to `vocab_size`) and their types.
fn vocabulary(tok: &Value, vocab_size: usize) -> Result<(Vec<String>, Vec<i32>), ConvertError> {
    let vocab = tok["model"]["vocab"]
        .as_object()
        .ok_or_else(|| bad("model.vocab is not a map"))?;
    let mut entries: Vec<(usize, String, i32)> = Vec::with_capacity(vocab.len());
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| bad(format!("vocab entry {text:?} has no integer id")))?;
        entries.push((id as usize, text.clone(), NORMAL));
    }
    for added in tok["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(text)) = (added["id"].as_u64(), added["content"].as_str()) else {
            continue;
        };
        let ty = if added["special"].as_bool() == Some(true) {
            CONTROL
        } else {
            USER_DEFINED
        };
        entries.push((id as usize, text.to_string(), ty));
    }
    let n = entries
        .iter()
        .map(|e| e.0 + 1)
        .max()
        .unwrap_or(0)
        .max(vocab_size);
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut types = vec![USER_DEFINED; n];
    for (id, text, ty) in entries {
        types[id] = if tokens[id].is_some() {
            types[id].max(ty)
        } else {
            ty
        };
        tokens[id] = Some(text);
    }
    let tokens = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
        .collect();
    Ok((tokens, types))
}

/// Merges as `"a b"` strings (tokenizer.json stores either that or `["a", "b"]`).
fn merges(v: &Value) -> Result<Vec<String>, ConvertError> {
    let list = v
        .as_array()
        .ok_or_else(|| bad("model.merges is not a list"))?;
    list.iter()
        .map(|m| match m {
            Value::String(s) => Ok(s.clone()),
            Value::Array(p) if p.len() == 2 => Ok(format!(
                "{} {}",
                p[0].as_str().unwrap_or(""),
                p[1].as_str().unwrap_or("")
            )),
            other => Err(bad(format!("bad merge {other}"))),
        })
        .collect()
}

/// `tokenizer.ggml.pre` for a byte-level pre-tokenizer: which split rules it applies.
fn pre_name(pre: &Value) -> Result<&'static str, ConvertError> {
    let mut parts = Vec::new();
    flatten(pre, &mut parts);
    let regexes: Vec<&str> = parts
        .iter()
        .filter_map(|p| p["pattern"]["Regex"].as_str())
        .collect();
    let digits = parts
        .iter()
        .any(|p| p["type"] == "Digits" && p["individual_digits"] == true);
    if !parts.iter().any(|p| p["type"] == "ByteLevel") {
        return Err(bad("the pre-tokenizer is not byte-level"));
    }
    Ok(match (digits, regexes.first()) {
        (true, None) => "smollm",
        (false, None) => "gpt2",
        (_, Some(r)) if r.contains(r"\p{N}{1,3}") => "llama-bpe",
        (_, Some(r)) if r.contains(r"|\p{N}|") || r.contains(r"|\p{N}| ") => "qwen2",
        (_, Some(r)) => return Err(bad(format!("unrecognized split regex {r:?}"))),
    })
}

fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v["pretokenizers"].as_array() {
        Some(list) => list.iter().for_each(|p| flatten(p, out)),
        None if !v.is_null() => out.push(v),
        None => {}
    }
}

/// Whether a `TemplateProcessing` post-processor puts a special token before the text.
fn post_processor_adds_bos(pp: &Value) -> bool {
    let mut parts = Vec::new();
    flatten_processors(pp, &mut parts);
    parts.iter().any(|p| {
        p["single"]
            .as_array()
            .and_then(|s| s.first())
            .is_some_and(|f| f.get("SpecialToken").is_some())
    })
}

fn flatten_processors<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v["processors"].as_array() {
        Some(list) => list.iter().for_each(|p| flatten_processors(p, out)),
        None => out.push(v),
    }
}

/// A special token given as `"<s>"` or `{"content": "<s>"}`.
fn token_text(v: &Value) -> Option<String> {
    v.as_str()
        .or_else(|| v["content"].as_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pre_tokenizer_families() {
        assert_eq!(pre_name(&json!({"type": "ByteLevel"})).unwrap(), "gpt2");
        let smol = json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, {"type": "ByteLevel"}]});
        assert_eq!(pre_name(&smol).unwrap(), "smollm");
        assert!(pre_name(&json!({"type": "Metaspace"})).is_err());
    }

    #[test]
    fn vocabulary_orders_by_id_and_types_added_tokens() {
        let tok = json!({"model": {"vocab": {"a": 1, "b": 2}}, "added_tokens": [{"id": 0, "content": "<s>", "special": true}]});
        let (tokens, types) = vocabulary(&tok, 4).unwrap();
        assert_eq!(tokens, vec!["<s>", "a", "b", "[PAD3]"]);
        assert_eq!(types, vec![CONTROL, NORMAL, NORMAL, USER_DEFINED]);
    }
}
