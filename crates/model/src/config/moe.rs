//! [`MoeConfig`]: the sparse mixture-of-experts MLP, read from an HF `config.json` (the
//! routed-experts reader the MoE family files share) or from GGUF metadata (llama.cpp's
//! `{arch}.expert_*` keys) and tensors.
//!
//! Every family routes the same way: softmax over all experts' router logits, keep the top
//! `top_k`, and (when `norm_topk_prob`) rescale the kept weights to sum to 1. Mixtral always
//! rescales; the Qwen families follow `norm_topk_prob` (llama.cpp: Qwen2-MoE never, Qwen3-MoE
//! always).

use crate::weights::gguf::{GgufFile, OptionalKey};

use super::from_hf::{bad, opt_bool, opt_usize, present, req_usize, Obj};
use super::{Architecture, ConfigError, ExpertActivation, RouterRule};

/// Sparse MLP hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Routed experts per sparse layer.
    pub n_experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// Intermediate size of one routed expert.
    pub expert_ffn: usize,
    /// Rescale the top-k routing weights to sum to 1.
    pub norm_topk_prob: bool,
    /// Intermediate size of the shared expert, gated by `sigmoid(w · x)` (Qwen2-MoE).
    pub shared_expert_ffn: Option<usize>,
    /// Per layer: a sparse MLP (`true`) or a dense one of `intermediate_size`.
    pub sparse_layers: Vec<bool>,
    /// How each expert combines its gate and up projections.
    pub activation: ExpertActivation,
    /// How router logits become choices and weights (softmax for every family but DeepSeek).
    pub routing: RouterRule,
}

impl MoeConfig {
    /// Check the invariants the MoE block relies on.
    pub fn validate(&self, n_layers: usize) -> Result<(), ConfigError> {
        if self.n_experts == 0 || self.expert_ffn == 0 {
            return Err(ConfigError::Invalid(
                "expert count and expert intermediate size must be > 0".into(),
            ));
        }
        if self.top_k == 0 || self.top_k > self.n_experts {
            return Err(ConfigError::Invalid(format!(
                "{} experts per token out of {}",
                self.top_k, self.n_experts
            )));
        }
        if self.shared_expert_ffn == Some(0) {
            return Err(ConfigError::Invalid("shared expert size is 0".into()));
        }
        if self.sparse_layers.len() != n_layers {
            return Err(ConfigError::Invalid(format!(
                "{} sparse-layer flags for {n_layers} layers",
                self.sparse_layers.len()
            )));
        }
        self.routing.validate(self.n_experts, self.top_k)
    }

    /// Whether layer `layer` has a sparse MLP.
    pub fn is_sparse(&self, layer: usize) -> bool {
        self.sparse_layers.get(layer).copied().unwrap_or(false)
    }

    /// From GGUF metadata: `{arch}.expert_count` > 0 makes the model sparse; the layers with a
    /// router tensor (`blk.N.ffn_gate_inp.weight`) are the sparse ones.
    pub(super) fn from_gguf(
        file: &GgufFile,
        arch_name: &str,
        arch: Architecture,
        n_layers: usize,
    ) -> Result<Option<MoeConfig>, ConfigError> {
        let key = |suffix: &str| format!("{arch_name}.{suffix}");
        let get = |suffix: &str| -> Result<Option<usize>, ConfigError> {
            Ok(file.get_u64(&key(suffix)).optional()?.map(|v| v as usize))
        };
        let n_experts = get("expert_count")?.unwrap_or(0);
        if n_experts == 0 {
            return match arch.family().gguf_requires_experts() {
                true => Err(ConfigError::MissingField(key("expert_count"))),
                false => Ok(None),
            };
        }
        let top_k = get("expert_used_count")?
            .ok_or_else(|| ConfigError::MissingField(key("expert_used_count")))?;
        let expert_ffn = match get("expert_feed_forward_length")? {
            Some(n) => n,
            None => get("feed_forward_length")?
                .ok_or_else(|| ConfigError::MissingField(key("feed_forward_length")))?,
        };
        let default_norm = arch.family().gguf_norm_topk_default();
        let norm_topk_prob = file
            .get_bool(&key("expert_weights_norm"))
            .optional()?
            .unwrap_or(default_norm);
        let shared_expert_ffn = match file.tensor_info("blk.0.ffn_gate_shexp.weight") {
            None => None,
            Some(info) => Some(match get("expert_shared_feed_forward_length")? {
                Some(n) => n,
                None => info.dims.get(1).map_or(0, |d| *d as usize),
            }),
        };
        let sparse_layers = (0..n_layers)
            .map(|i| {
                file.tensor_info(&format!("blk.{i}.ffn_gate_inp.weight"))
                    .is_some()
            })
            .collect();
        Ok(Some(MoeConfig {
            n_experts,
            top_k,
            expert_ffn,
            norm_topk_prob,
            shared_expert_ffn,
            sparse_layers,
            activation: arch.family().gguf_expert_activation(),
            routing: RouterRule::SOFTMAX,
        }))
    }
}

/// Routed experts as the Qwen MoE config classes describe them: `num_experts` (or
/// `num_local_experts`, as transformers 5 writes it), top `num_experts_per_tok` (default 4),
/// `moe_intermediate_size`; a layer is sparse unless listed in `mlp_only_layers`, and only
/// every `decoder_sparse_step`-th layer (1-based) is (transformers' rule). `shared_default`:
/// the family has a gated shared expert, `shared_expert_intermediate_size` defaulting to it.
pub(crate) fn routed_from_hf(
    obj: &Obj,
    n_layers: usize,
    shared_default: Option<usize>,
) -> Result<MoeConfig, ConfigError> {
    let n_experts = match opt_usize(obj, "num_experts")? {
        Some(n) => n,
        None => req_usize(obj, "num_local_experts")?,
    };
    let step = opt_usize(obj, "decoder_sparse_step")?.unwrap_or(1);
    if step == 0 {
        return Err(bad("decoder_sparse_step", "must be > 0"));
    }
    let dense = mlp_only_layers(obj)?;
    let sparse_layers = (0..n_layers)
        .map(|i| !dense.contains(&i) && n_experts > 0 && (i + 1).is_multiple_of(step))
        .collect();
    let shared_expert_ffn = match shared_default {
        Some(default) => {
            Some(opt_usize(obj, "shared_expert_intermediate_size")?.unwrap_or(default))
        }
        None => None,
    };
    Ok(MoeConfig {
        n_experts,
        top_k: opt_usize(obj, "num_experts_per_tok")?.unwrap_or(4),
        expert_ffn: req_usize(obj, "moe_intermediate_size")?,
        norm_topk_prob: opt_bool(obj, "norm_topk_prob")?.unwrap_or(false),
        shared_expert_ffn: shared_expert_ffn.filter(|n| *n > 0),
        sparse_layers,
        activation: ExpertActivation::SiluGated,
        routing: RouterRule::SOFTMAX,
    })
}

/// `mlp_only_layers`: layer indices with a dense MLP.
fn mlp_only_layers(obj: &Obj) -> Result<Vec<usize>, ConfigError> {
    let Some(value) = present(obj, "mlp_only_layers") else {
        return Ok(Vec::new());
    };
    let items = value
        .as_array()
        .ok_or_else(|| bad("mlp_only_layers", "expected a list"))?;
    items
        .iter()
        .map(|v| {
            v.as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| bad("mlp_only_layers", &format!("expected an index, got {v}")))
        })
        .collect()
}
