//! Reading a PEFT LoRA directory: `adapter_config.json` (rank `r`, `lora_alpha`, `use_rslora`,
//! `target_modules`) and `adapter_model.safetensors`, whose tensors are named like
//! `base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight` (A: `[r, in]`) and
//! `….lora_B.weight` (B: `[out, r]`).
//!
//! The delta is `scale · B · A` with `scale = lora_alpha / r`, or `lora_alpha / √r` with
//! rsLoRA. Refused: pickled weights only, `modules_to_save`, DoRA, per-module rank or alpha
//! patterns, trained biases, and modules other than the seven projections (or the fused
//! `qkv_proj` / `gate_up_proj`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::error::LoraError;
use super::raw::{pair, LoraSource, RawLora};
use super::target::LoraModule;
use crate::weights::safetensors::SafetensorsCheckpoint;
use crate::weights::TensorSource;

const CONFIG: &str = "adapter_config.json";
const WEIGHTS: &str = "adapter_model.safetensors";
const PICKLE: &str = "adapter_model.bin";

/// The parts of `adapter_config.json` that decide the delta.
#[derive(Debug, Clone, PartialEq)]
pub struct PeftConfig {
    pub rank: usize,
    pub alpha: f32,
    pub use_rslora: bool,
    pub target_modules: Vec<String>,
}

impl PeftConfig {
    /// `alpha / r`, or `alpha / √r` with rsLoRA.
    pub fn scale(&self) -> f32 {
        let r = self.rank as f64;
        let denom = if self.use_rslora { r.sqrt() } else { r };
        (f64::from(self.alpha) / denom) as f32
    }

    /// Parse and check `adapter_config.json`.
    pub fn parse(text: &str) -> Result<PeftConfig, LoraError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| LoraError::BadConfig(e.to_string()))?;
        if let Some(t) = v.get("peft_type").and_then(Value::as_str) {
            if t != "LORA" {
                return Err(LoraError::BadConfig(format!(
                    "peft_type is `{t}`, only LORA is supported"
                )));
            }
        }
        if v.get("use_dora").and_then(Value::as_bool) == Some(true) {
            return Err(LoraError::Dora);
        }
        let saved = strings(v.get("modules_to_save"));
        if !saved.is_empty() {
            return Err(LoraError::ModulesToSave(saved));
        }
        for key in ["rank_pattern", "alpha_pattern"] {
            if v.get(key)
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
            {
                return Err(LoraError::BadConfig(format!(
                    "`{key}` (per-module rank or alpha) is not supported"
                )));
            }
        }
        for key in ["fan_in_fan_out", "lora_bias"] {
            if v.get(key).and_then(Value::as_bool) == Some(true) {
                return Err(LoraError::BadConfig(format!(
                    "`{key}: true` is not supported"
                )));
            }
        }
        if let Some(bias) = v.get("bias").and_then(Value::as_str) {
            if bias != "none" {
                return Err(LoraError::BadConfig(format!(
                    "bias = `{bias}` (trained biases) is not supported"
                )));
            }
        }
        let rank = v
            .get("r")
            .and_then(Value::as_u64)
            .filter(|&r| r > 0)
            .ok_or_else(|| LoraError::BadConfig("`r` must be a positive integer".into()))?;
        let alpha = v
            .get("lora_alpha")
            .and_then(Value::as_f64)
            .ok_or_else(|| LoraError::BadConfig("`lora_alpha` is missing".into()))?;
        let target_modules = strings(v.get("target_modules"));
        for m in &target_modules {
            LoraModule::from_peft(m)?;
        }
        Ok(PeftConfig {
            rank: rank as usize,
            alpha: alpha as f32,
            use_rslora: v.get("use_rslora").and_then(Value::as_bool) == Some(true),
            target_modules,
        })
    }
}

/// A string or a list of strings (PEFT writes `target_modules` either way); `null` is empty.
fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Read the PEFT adapter in `dir`.
pub fn load_peft(dir: &Path) -> Result<RawLora, LoraError> {
    let unreadable = |reason: String| LoraError::Unreadable {
        path: dir.to_path_buf(),
        reason,
    };
    let config_path = dir.join(CONFIG);
    let text = std::fs::read_to_string(&config_path)
        .map_err(|e| unreadable(format!("{}: {e}", config_path.display())))?;
    let config = PeftConfig::parse(&text)?;
    let weights = dir.join(WEIGHTS);
    if !weights.is_file() {
        if dir.join(PICKLE).is_file() {
            return Err(LoraError::PickleOnly {
                dir: dir.to_path_buf(),
            });
        }
        return Err(unreadable(format!("{WEIGHTS} is missing")));
    }
    let ckpt = SafetensorsCheckpoint::open(&weights)?;
    let mut halves: BTreeMap<(usize, LoraModule), [Option<String>; 2]> = BTreeMap::new();
    for name in ckpt.tensor_names() {
        let (key, half) = parse_name(&name)?;
        halves.entry(key).or_default()[half] = Some(name);
    }
    let scale = config.scale();
    let mut pairs = Vec::with_capacity(halves.len());
    for (key, [a, b]) in halves {
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (Some(x), None) | (None, Some(x)) => return Err(LoraError::Unpaired(x)),
            (None, None) => continue,
        };
        let view = |n: &str| {
            ckpt.tensor(n)
                .ok_or_else(|| LoraError::Unpaired(n.to_string()))
        };
        pairs.push(pair(
            key,
            &view(&a)?,
            &view(&b)?,
            Some(config.rank),
            |_| scale,
        )?);
    }
    RawLora::new(LoraSource::Peft, pairs)
}

/// `….layers.<i>.<block>.<module>.lora_{A,B}[.<adapter name>].weight` → ((i, module), 0 for A
/// or 1 for B).
fn parse_name(name: &str) -> Result<((usize, LoraModule), usize), LoraError> {
    let unknown = || LoraError::UnknownTarget(name.to_string());
    let parts: Vec<&str> = name.split('.').collect();
    let half = parts
        .iter()
        .position(|p| *p == "lora_A" || *p == "lora_B")
        .ok_or_else(unknown)?;
    let layers = parts
        .iter()
        .position(|p| *p == "layers")
        .ok_or_else(unknown)?;
    let layer: usize = parts
        .get(layers + 1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(unknown)?;
    let module = half.checked_sub(1).map(|i| parts[i]).ok_or_else(unknown)?;
    let module = LoraModule::from_peft(module).map_err(|_| unknown())?;
    Ok(((layer, module), usize::from(parts[half] == "lora_B")))
}
