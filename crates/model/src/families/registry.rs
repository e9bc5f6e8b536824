//! The registry: every family Kestrel runs, one line each, in the order error messages list
//! them; and the lookups by name, HF `model_type` and HF class.

use super::family::Family;
use super::{bloom, deepseek, gemma2, gemma3, gpt_oss, llama, mistral, mixtral, phi3};
use super::{qwen2, qwen2_moe, qwen3, qwen3_moe, Architecture};
use crate::config::ConfigError;

/// The families, one line each.
static FAMILIES: [&dyn Family; 14] = [
    &llama::Llama,
    &mistral::Mistral,
    &qwen2::Qwen2,
    &qwen3::Qwen3,
    &phi3::Phi3,
    &bloom::Bloom,
    &mixtral::Mixtral,
    &qwen2_moe::Qwen2Moe,
    &qwen3_moe::Qwen3Moe,
    &gemma2::Gemma2,
    &gemma3::Gemma3,
    &gpt_oss::GptOss,
    &deepseek::DeepseekV2,
    &deepseek::DeepseekV3,
];

/// Every registered family.
pub fn all() -> impl Iterator<Item = Architecture> {
    FAMILIES.iter().map(|f| Architecture::new(*f))
}

/// The registered names, comma-separated (for error messages).
pub fn supported_names() -> String {
    let names: Vec<&str> = all().map(Architecture::name).collect();
    names.join(", ")
}

/// The names of the families the HF → GGUF converter handles, joined with "and".
pub fn convertible_names() -> String {
    let names: Vec<&str> = all()
        .filter(|a| a.gguf_export_name().is_some())
        .map(Architecture::name)
        .collect();
    names.join(" and ")
}

/// The family named `name` (registry name or alias).
pub fn by_name(name: &str) -> Option<Architecture> {
    all().find(|a| {
        let names = a.family().names();
        names.name == name || names.aliases.contains(&name)
    })
}

/// The family of an HF `architectures` class.
pub fn by_hf_class(class: &str) -> Option<Architecture> {
    all().find(|a| a.family().names().hf_class == class)
}

/// The family of a `config.json` `model_type`, refused where the family says so.
pub(crate) fn by_hf_model_type(model_type: &str) -> Result<Architecture, ConfigError> {
    if let Some(a) = all().find(|a| a.family().names().hf_model_types.contains(&model_type)) {
        return Ok(a);
    }
    let arch = by_name(model_type)
        .ok_or_else(|| ConfigError::UnsupportedArchitecture(model_type.to_string()))?;
    arch.family().check_hf_model_type(model_type)?;
    Ok(arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_found_by_its_names_and_class() {
        for arch in all() {
            let names = arch.family().names();
            assert_eq!(by_name(names.name), Some(arch));
            assert_eq!(by_hf_class(names.hf_class), Some(arch));
            for alias in names.aliases {
                assert_eq!(by_name(alias), Some(arch), "{alias}");
            }
        }
    }

    #[test]
    fn names_and_classes_are_unique() {
        let mut seen: Vec<&str> = Vec::new();
        for arch in all() {
            let names = arch.family().names();
            let own = [names.name, names.hf_class].into_iter();
            for name in own.chain(names.aliases.iter().copied()) {
                assert!(!seen.contains(&name), "{name} is registered twice");
                seen.push(name);
            }
        }
    }
}
