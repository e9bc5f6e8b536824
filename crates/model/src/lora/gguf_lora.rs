//! Reading a llama.cpp LoRA adapter GGUF: metadata `general.type = adapter`,
//! `adapter.type = lora`, `adapter.lora.alpha`; tensors `blk.<i>.<part>.weight.lora_a`
//! (`[rank, in]`) and `….lora_b` (`[out, rank]`), F32, F16 or BF16.
//!
//! The delta is `scale · B · A` with `scale = alpha / rank` per tensor pair, and `scale = 1`
//! when alpha is 0 or absent (llama.cpp's rule). rsLoRA has no field in the format: an rsLoRA
//! adapter is written with `alpha · √r` to keep its scale.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::LoraError;
use super::raw::{pair, LoraSource, RawLora};
use super::target::LoraModule;
use crate::weights::gguf::GgufFile;
use crate::weights::TensorSource;

/// Read the adapter GGUF at `path`.
pub fn load_gguf_lora(path: &Path) -> Result<RawLora, LoraError> {
    let file = GgufFile::open(path)?;
    let is_adapter = file.get_str("general.type").ok() == Some("adapter")
        && file.get_str("adapter.type").ok() == Some("lora");
    if !is_adapter {
        return Err(LoraError::NotAnAdapter(path.to_path_buf()));
    }
    let alpha = file
        .get("adapter.lora.alpha")
        .and_then(|v| v.as_f32())
        .unwrap_or(0.0);
    let mut halves: BTreeMap<(usize, LoraModule), [Option<String>; 2]> = BTreeMap::new();
    for name in file.tensor_names() {
        let (key, half) = parse_name(&name)?;
        halves.entry(key).or_default()[half] = Some(name);
    }
    let scale = |rank: usize| match alpha {
        0.0 => 1.0,
        a => a / rank as f32,
    };
    let mut pairs = Vec::with_capacity(halves.len());
    for (key, [a, b]) in halves {
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (Some(x), None) | (None, Some(x)) => return Err(LoraError::Unpaired(x)),
            (None, None) => continue,
        };
        let view = |n: &str| {
            file.tensor(n)
                .ok_or_else(|| LoraError::Unpaired(n.to_string()))
        };
        pairs.push(pair(key, &view(&a)?, &view(&b)?, None, scale)?);
    }
    RawLora::new(LoraSource::LlamaCpp, pairs)
}

/// `blk.<i>.<part>.weight.lora_{a,b}` → ((i, module), 0 for A or 1 for B).
fn parse_name(name: &str) -> Result<((usize, LoraModule), usize), LoraError> {
    let unknown = || LoraError::UnknownTarget(name.to_string());
    let rest = name.strip_prefix("blk.").ok_or_else(unknown)?;
    let (layer, rest) = rest.split_once('.').ok_or_else(unknown)?;
    let layer: usize = layer.parse().map_err(|_| unknown())?;
    let (part, half) = if let Some(p) = rest.strip_suffix(".weight.lora_a") {
        (p, 0)
    } else if let Some(p) = rest.strip_suffix(".weight.lora_b") {
        (p, 1)
    } else {
        return Err(unknown());
    };
    let module = LoraModule::from_gguf(part).map_err(|_| unknown())?;
    Ok(((layer, module), half))
}
