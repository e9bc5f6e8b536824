//! GGUF → HF checkpoint directory: every tensor dequantized, renamed, Q/K rows put back in HF
//! order, stored as F32/F16/BF16 in `model.safetensors`, next to the JSON files transformers
//! reads and a `tokenizer.json` serialized from the tokenizer the GGUF metadata describes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use kestrel_model::config::ModelConfig;
use kestrel_model::layers::to_f32_vec;
use kestrel_model::tokenizer::{keys, Tokenizer};
use kestrel_model::weights::gguf::{GgufFile, OptionalKey};
use kestrel_model::weights::TensorSource;

use super::names::{rope_permuted, NameMap};
use super::{hf_config, ConvertError, FloatType, LoraMerge};
use crate::codec::encode_threads;
use crate::plan::TensorPlan;
use kestrel_model::qk_rows as permute;

/// One converted tensor, ready for `safetensors`.
struct OwnedTensor {
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl safetensors::View for OwnedTensor {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Convert the GGUF file `input` into an HF checkpoint directory `output` (created if
/// needed) with tensors stored as `dtype`. Calls `on_tensor` after each tensor.
pub fn gguf_to_hf(
    input: &Path,
    output: &Path,
    dtype: FloatType,
    on_tensor: &mut dyn FnMut(&TensorPlan),
) -> Result<(), ConvertError> {
    gguf_to_hf_merged(input, output, dtype, None, on_tensor)
}

/// [`gguf_to_hf`] with the LoRA adapter at `lora` (if any) merged into the weights.
pub fn gguf_to_hf_merged(
    input: &Path,
    output: &Path,
    dtype: FloatType,
    lora: Option<&Path>,
    on_tensor: &mut dyn FnMut(&TensorPlan),
) -> Result<(), ConvertError> {
    let file = GgufFile::open(input)?;
    let config = ModelConfig::from_gguf(&file)?;
    super::llama_meta::check_llama(&config)?;
    let tokenizer =
        Tokenizer::from_gguf_metadata(&file).map_err(|e| ConvertError::Tokenizer(e.to_string()))?;
    std::fs::create_dir_all(output).map_err(|e| ConvertError::io(output, e))?;
    let merge = lora.map(|p| LoraMerge::open(p, &config)).transpose()?;
    let tensors = convert_tensors(&file, &config, (dtype, merge.as_ref()), on_tensor)?;
    let st_path = output.join("model.safetensors");
    let info = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(tensors, Some(info), &st_path)?;
    let add_bos = file
        .get_bool(keys::ADD_BOS)
        .optional()?
        .unwrap_or(file.get_str(keys::MODEL).ok() == Some("llama"));
    let add_eos = file.get_bool(keys::ADD_EOS).optional()?.unwrap_or(false);
    let tok_json = tokenizer
        .to_json(false)
        .map_err(|e| ConvertError::Tokenizer(e.to_string()))?;
    write(output, "tokenizer.json", tok_json)?;
    let tcfg = hf_config::tokenizer_config_json(
        &tokenizer,
        add_bos,
        add_eos,
        config.max_position_embeddings,
    );
    write(
        output,
        "tokenizer_config.json",
        serde_json::to_string_pretty(&tcfg)?,
    )?;
    write(
        output,
        "config.json",
        serde_json::to_string_pretty(&hf_config::config_json(&config, dtype)?)?,
    )?;
    write(
        output,
        "generation_config.json",
        serde_json::to_string_pretty(&hf_config::generation_config_json(&config))?,
    )?;
    Ok(())
}

fn write(dir: &Path, name: &str, text: String) -> Result<(), ConvertError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| ConvertError::io(&path, e))
}

/// Every tensor of `file` under its HF name, in HF row order, as `dtype`.
fn convert_tensors(
    file: &GgufFile,
    config: &ModelConfig,
    (dtype, merge): (FloatType, Option<&LoraMerge>),
    on_tensor: &mut dyn FnMut(&TensorPlan),
) -> Result<Vec<(String, OwnedTensor)>, ConvertError> {
    let names = NameMap::new(config.n_layers);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = Vec::new();
    for name in file.tensor_names() {
        let start = std::time::Instant::now();
        let hf = names.hf_name(&name).ok_or_else(|| {
            ConvertError::Unsupported(format!("tensor {name:?} has no HF Llama counterpart"))
        })?;
        let view = file
            .tensor(&name)
            .ok_or_else(|| ConvertError::Unsupported(format!("tensor {name:?} is unreadable")))?;
        let mut values = to_f32_vec(&view)?;
        if let Some(m) = merge {
            m.apply(&name, &mut values);
        }
        let row_len = if view.shape.len() < 2 {
            1
        } else {
            view.shape[view.shape.len() - 1]
        };
        if let Some(is_k) = rope_permuted(&name) {
            let heads = if is_k {
                config.n_kv_heads
            } else {
                config.n_heads
            };
            values = permute::gguf_to_hf(&values, heads, row_len);
        }
        let data = encode_threads(dtype.dtype(), &values, row_len, threads);
        let plan = TensorPlan {
            name: hf.to_string(),
            shape: view.shape.clone(),
            from: view.dtype,
            to: dtype.dtype(),
            seconds: 0.0,
        };
        on_tensor(&TensorPlan {
            seconds: start.elapsed().as_secs_f64(),
            ..plan
        });
        out.push((
            hf.to_string(),
            OwnedTensor {
                dtype: dtype.safetensors_dtype(),
                shape: view.shape.clone(),
                data,
            },
        ));
    }
    Ok(out)
}
