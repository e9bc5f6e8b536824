//! [`ModelSource`]: a model as GGUF metadata plus GGUF-named tensors, whether it came from a
//! GGUF file or an HF checkpoint directory. HF tensors are renamed and their Q/K rows put
//! in GGUF order lazily, when [`SourceTensor::to_f32`] is called.

use std::path::Path;

use kestrel_kernels::DType;
use kestrel_model::arch::naming::TensorNaming;
use kestrel_model::config::ModelConfig;
use kestrel_model::layers::to_f32_vec;
use kestrel_model::weights::gguf::{
    GgufFile, MetaValue, INPUT_PERM_KEY_PREFIX, OUTLIER_COLS_KEY_PREFIX,
};
use kestrel_model::weights::safetensors::SafetensorsCheckpoint;
use kestrel_model::weights::{TensorSource, TensorView};

use super::names::{rope_permuted, NameMap};
use super::ConvertError;
use kestrel_model::qk_rows as permute;

/// One tensor, named as in GGUF.
#[derive(Debug, Clone)]
pub struct SourceTensor {
    /// GGUF name (`blk.0.attn_q.weight`).
    pub name: String,
    /// The stored tensor (its own name, type and row-major shape).
    pub view: TensorView,
    /// `Some(heads)` when the rows must be permuted from HF to GGUF order.
    permute_heads: Option<usize>,
}

impl SourceTensor {
    /// Row-major shape (outermost first).
    pub fn shape(&self) -> &[usize] {
        &self.view.shape
    }

    /// The stored element type.
    pub fn dtype(&self) -> DType {
        self.view.dtype
    }

    /// The values in GGUF row order, dequantized to `f32`.
    pub fn to_f32(&self) -> Result<Vec<f32>, ConvertError> {
        let values = to_f32_vec(&self.view)?;
        Ok(match self.permute_heads {
            Some(heads) => permute::hf_to_gguf(&values, heads, self.row_len()),
            None => values,
        })
    }

    /// The stored bytes, if they are already in GGUF layout (no row permutation needed).
    pub fn gguf_bytes(&self) -> Option<&[u8]> {
        self.permute_heads.is_none().then_some(&self.view.data[..])
    }

    /// Elements per row (1 for a 1-D tensor's single "row" per element).
    pub fn row_len(&self) -> usize {
        match self.view.shape.len() {
            0 | 1 => 1,
            n => self.view.shape[n - 1],
        }
    }
}

/// A whole model in GGUF terms.
pub struct ModelSource {
    pub config: ModelConfig,
    /// GGUF metadata, in file order.
    pub metadata: Vec<(String, MetaValue)>,
    /// Tensors in GGUF file order.
    pub tensors: Vec<SourceTensor>,
}

impl ModelSource {
    /// Open a `.gguf` file or an HF checkpoint directory.
    pub fn open(path: &Path) -> Result<ModelSource, ConvertError> {
        if path.is_dir() {
            Self::from_hf_dir(path)
        } else {
            Self::from_gguf(path)
        }
    }

    fn from_gguf(path: &Path) -> Result<ModelSource, ConvertError> {
        let file = GgufFile::open(path)?;
        let rearranged = [INPUT_PERM_KEY_PREFIX, OUTLIER_COLS_KEY_PREFIX];
        if file
            .metadata()
            .iter()
            .any(|(k, _)| rearranged.iter().any(|p| k.starts_with(p)))
        {
            return Err(ConvertError::Unsupported(format!(
                "{} stores matrices with permuted or split-off input columns (GPTQ act-order, INT8 \
                 outlier channels); convert or quantize the model it was made from instead",
                path.display()
            )));
        }
        let config = ModelConfig::from_gguf(&file)?;
        let tensors = file
            .tensor_names()
            .into_iter()
            .filter_map(|name| {
                file.tensor(&name).map(|view| SourceTensor {
                    name,
                    view,
                    permute_heads: None,
                })
            })
            .collect();
        Ok(ModelSource {
            config,
            metadata: file.metadata().to_vec(),
            tensors,
        })
    }

    fn from_hf_dir(dir: &Path) -> Result<ModelSource, ConvertError> {
        let config_path = dir.join("config.json");
        let text =
            std::fs::read_to_string(&config_path).map_err(|e| ConvertError::io(&config_path, e))?;
        let config = ModelConfig::from_hf_json(&text)?;
        super::llama_meta::check_llama(&config)?;
        let checkpoint =
            SafetensorsCheckpoint::open(dir).map_err(kestrel_model::ModelError::from)?;
        let names = NameMap::new(config.n_layers);
        let mut tensors = Vec::new();
        for gguf in gguf_order(config.n_layers) {
            let Some(hf) = names.hf_name(&gguf) else {
                continue;
            };
            let Some(view) = checkpoint.tensor(hf) else {
                continue;
            };
            if gguf == TensorNaming::Gguf.output() && config.tie_word_embeddings {
                continue;
            }
            let permute_heads = rope_permuted(&gguf).map(|is_k| {
                if is_k {
                    config.n_kv_heads
                } else {
                    config.n_heads
                }
            });
            tensors.push(SourceTensor {
                name: gguf,
                view,
                permute_heads,
            });
        }
        for name in checkpoint.tensor_names() {
            if names.gguf_name(&name).is_none() {
                tracing::warn!(tensor = %name, "not a Llama tensor; left out of the conversion");
            }
        }
        let metadata = super::llama_meta::gguf_metadata(&config, dir)?;
        Ok(ModelSource {
            config,
            metadata,
            tensors,
        })
    }
}

impl ModelSource {
    /// Fold `merge`'s deltas into the tensors it changes; they become F32 in GGUF row order.
    pub fn merge_lora(&mut self, merge: &super::LoraMerge) -> Result<(), ConvertError> {
        for t in &mut self.tensors {
            let mut values = t.to_f32()?;
            if merge.apply(&t.name, &mut values) {
                t.view = TensorView {
                    name: t.view.name.clone(),
                    dtype: DType::F32,
                    shape: t.view.shape.clone(),
                    data: kestrel_kernels::SharedBytes::from_f32(&values),
                };
                t.permute_heads = None;
            }
        }
        Ok(())
    }
}

/// GGUF tensor names in llama.cpp's file order.
fn gguf_order(n_layers: usize) -> Vec<String> {
    let g = TensorNaming::Gguf;
    let mut out = vec![g.embedding()];
    for layer in 0..n_layers {
        for part in [
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ] {
            for suffix in ["weight", "bias"] {
                out.push(format!("blk.{layer}.{part}.{suffix}"));
            }
        }
    }
    out.push(g.final_norm());
    out.push(g.output().to_string());
    out
}
