//! DeepSeek V2 and V3 (`DeepseekV2ForCausalLM` / `deepseek_v2`, `DeepseekV3ForCausalLM` /
//! `deepseek_v3`; llama.cpp writes both as GGUF `deepseek2`): multi-head latent attention
//! ([`MlaConfig`]: an optional query bottleneck `q_lora_rank`, the compressed latent
//! `kv_lora_rank` and the decoupled rotary key `qk_rope_head_dim`, rotated in interleaved
//! pairs), the first `first_k_dense_replace` layers dense and the rest sparse, with
//! `n_shared_experts` ungated shared experts (one MLP of `n_shared_experts ·
//! moe_intermediate_size`) beside the routed ones.
//!
//! Routing ([`RouterRule`]): V2 takes the softmax top-k (`topk_method` `greedy`, or
//! `group_limited_greedy`: groups ranked by their best score), V3 sigmoid scores with the
//! `e_score_correction_bias` in the choice and groups ranked by their two best scores
//! (`n_group`, `topk_group`); both scale the weights by `routed_scaling_factor`, and
//! renormalize them with `norm_topk_prob`.
//!
//! YaRN ([`MlaConfig::softmax_scale`]): besides the rotary attention factor
//! (`mscale / mscale_all_dim`, 1 in released configs), the softmax scale is multiplied by
//! `mscale(factor, mscale_all_dim)²`. A GGUF stores `0.1 · mscale_all_dim` as
//! `rope.scaling.yarn_log_multiplier` and no `mscale`; llama.cpp takes the rotary attention
//! factor to be 1.

use super::family::{Family, FamilyNames, HfDefaults};
use super::Architecture;
use crate::arch::moe_naming::HfMoeLayout;
use crate::config::from_hf::{
    self, bad, opt_bool, opt_f32, opt_f64, opt_str, opt_usize, req_usize, Obj,
};
use crate::config::{
    ConfigError, ExpertActivation, ExpertGroups, GroupScore, MlaConfig, ModelConfig, MoeConfig,
    RopeScaling, RouterRule, Scoring,
};
use crate::weights::gguf::{GgufFile, OptionalKey};

/// The version's defaults where it differs.
struct Version {
    names: FamilyNames,
    max_positions: usize,
    shared_experts: usize,
    routed_scale: f32,
    norm_topk: bool,
    scoring: Scoring,
}

pub(crate) struct DeepseekV2;
pub(crate) struct DeepseekV3;

static V2: Version = Version {
    names: FamilyNames {
        name: "deepseek_v2",
        aliases: &["deepseek2"],
        hf_model_types: &[],
        hf_class: "DeepseekV2ForCausalLM",
    },
    max_positions: 2048,
    shared_experts: 2,
    routed_scale: 1.0,
    norm_topk: false,
    scoring: Scoring::Softmax,
};

static V3: Version = Version {
    names: FamilyNames {
        name: "deepseek_v3",
        aliases: &[],
        hf_model_types: &[],
        hf_class: "DeepseekV3ForCausalLM",
    },
    max_positions: 4096,
    shared_experts: 1,
    routed_scale: 2.5,
    norm_topk: true,
    scoring: Scoring::Sigmoid,
};

impl Family for DeepseekV2 {
    fn names(&self) -> &'static FamilyNames {
        &V2.names
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(V2.max_positions)
    }

    fn hf_config(&self, arch: Architecture, obj: &Obj) -> Result<ModelConfig, ConfigError> {
        config(arch, obj)
    }

    fn hf_moe(&self, obj: &Obj, n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        moe(&V2, obj, n_layers)
    }

    fn hf_moe_layout(&self) -> HfMoeLayout {
        HfMoeLayout::SharedExperts
    }

    fn gguf_norm_topk_default(&self) -> bool {
        false
    }

    fn gguf_finish(
        &self,
        file: &GgufFile,
        arch_name: &str,
        cfg: &mut ModelConfig,
    ) -> Result<(), ConfigError> {
        gguf_finish(file, arch_name, cfg)
    }
}

impl Family for DeepseekV3 {
    fn names(&self) -> &'static FamilyNames {
        &V3.names
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(V3.max_positions)
    }

    fn hf_config(&self, arch: Architecture, obj: &Obj) -> Result<ModelConfig, ConfigError> {
        config(arch, obj)
    }

    fn hf_moe(&self, obj: &Obj, n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        moe(&V3, obj, n_layers)
    }

    fn hf_moe_layout(&self) -> HfMoeLayout {
        HfMoeLayout::SharedExperts
    }
}

/// The shared decoder keys with the cache geometry of MLA (one kv head of latent + rotary
/// key, `qk_rope_head_dim` of it rotated), then the MLA sizes.
fn config(arch: Architecture, obj: &Obj) -> Result<ModelConfig, ConfigError> {
    if opt_bool(obj, "rope_interleave")? == Some(false) {
        return Err(ConfigError::Unsupported(
            "DeepSeek with rope_interleave false (rotate-half pairing of the rotary key)".into(),
        ));
    }
    let opt_rank = |key: &str| opt_usize(obj, key).map(|r| r.filter(|&r| r > 0));
    let kv_lora_rank = req_usize(obj, "kv_lora_rank")?;
    let rope = req_usize(obj, "qk_rope_head_dim")?;
    let mut geometry = obj.clone();
    geometry.insert("head_dim".into(), (kv_lora_rank + rope).into());
    geometry.insert("num_key_value_heads".into(), 1.into());
    geometry.remove("partial_rotary_factor");
    let mut cfg = from_hf::decoder_config(arch, &geometry)?;
    cfg.rotary_dim = rope;
    let qk_nope = req_usize(obj, "qk_nope_head_dim")?;
    cfg.mla = Some(MlaConfig {
        q_lora_rank: opt_rank("q_lora_rank")?,
        kv_lora_rank,
        qk_nope_head_dim: qk_nope,
        qk_rope_head_dim: rope,
        v_head_dim: req_usize(obj, "v_head_dim")?,
        softmax_scale: MlaConfig::scale_for(qk_nope + rope, yarn_all_dim(obj, &cfg)?),
    });
    cfg.validate()?;
    Ok(cfg)
}

/// YaRN's `factor` and `mscale_all_dim`, when the rope scaling is YaRN and sets it.
fn yarn_all_dim(obj: &Obj, cfg: &ModelConfig) -> Result<Option<(f64, f64)>, ConfigError> {
    let Some(RopeScaling::Yarn { factor, .. }) = &cfg.rope_scaling else {
        return Ok(None);
    };
    let Some(params) = from_hf::rope_params(obj)? else {
        return Ok(None);
    };
    Ok(opt_f64(params, "mscale_all_dim")?.map(|a| (f64::from(*factor), a)))
}

/// The sparse layers: from `first_k_dense_replace` on, every `moe_layer_freq`-th; `None` for
/// a model without routed experts.
fn moe(v: &Version, obj: &Obj, n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
    let Some(n_experts) = opt_usize(obj, "n_routed_experts")?.filter(|&n| n > 0) else {
        return Ok(None);
    };
    let first_dense = opt_usize(obj, "first_k_dense_replace")?.unwrap_or(0);
    let freq = opt_usize(obj, "moe_layer_freq")?.unwrap_or(1);
    if freq == 0 {
        return Err(bad("moe_layer_freq", "must be > 0"));
    }
    let expert_ffn = req_usize(obj, "moe_intermediate_size")?;
    let shared = opt_usize(obj, "n_shared_experts")?.unwrap_or(v.shared_experts);
    Ok(Some(MoeConfig {
        n_experts,
        top_k: req_usize(obj, "num_experts_per_tok")?,
        expert_ffn,
        norm_topk_prob: opt_bool(obj, "norm_topk_prob")?.unwrap_or(v.norm_topk),
        shared_expert_ffn: (shared > 0).then_some(shared * expert_ffn),
        sparse_layers: (0..n_layers)
            .map(|i| i >= first_dense && i.is_multiple_of(freq))
            .collect(),
        activation: ExpertActivation::SiluGated,
        routing: router_rule(v, obj)?,
    }))
}

fn router_rule(v: &Version, obj: &Obj) -> Result<RouterRule, ConfigError> {
    let scoring = match opt_str(obj, "scoring_func")? {
        None => v.scoring,
        Some("softmax") => Scoring::Softmax,
        Some("sigmoid") => Scoring::Sigmoid,
        Some(other) => return Err(bad("scoring_func", &format!("unsupported {other:?}"))),
    };
    let group_score = match (scoring, opt_str(obj, "topk_method")?) {
        (_, Some("group_limited_greedy")) => Some(GroupScore::Max),
        (Scoring::Sigmoid, _) => Some(GroupScore::TopTwoSum),
        (Scoring::Softmax, _) => None,
    };
    let groups = match (group_score, opt_usize(obj, "n_group")?) {
        (Some(score), Some(n)) if n > 1 => Some(ExpertGroups {
            n_groups: n,
            top_groups: req_usize(obj, "topk_group")?,
            score,
        }),
        _ => None,
    };
    Ok(RouterRule {
        scoring,
        groups,
        scale: opt_f32(obj, "routed_scaling_factor")?.unwrap_or(v.routed_scale),
    })
}

/// A `deepseek2` GGUF: the MLA sizes (`attention.kv_lora_rank`, `.q_lora_rank`,
/// `.key_length_mla` / `.value_length_mla`, or in older files the per-head `key_length` /
/// `value_length`), the shared experts (`expert_shared_count`), the routing
/// (`expert_gating_func`: 1 softmax, 2 sigmoid; absent: softmax; groups ranked by their two
/// best scores, as llama.cpp does for every gating; `expert_weights_scale`) and YaRN as
/// llama.cpp reads it for this architecture (rotary attention factor 1, the softmax scale from
/// `yarn_log_multiplier / 0.1`, which is `mscale_all_dim`).
fn gguf_finish(file: &GgufFile, arch: &str, cfg: &mut ModelConfig) -> Result<(), ConfigError> {
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let get = |suffix: &str| -> Result<Option<usize>, ConfigError> {
        Ok(file.get_u64(&key(suffix)).optional()?.map(|v| v as usize))
    };
    let need = |suffix: &str| get(suffix)?.ok_or_else(|| ConfigError::MissingField(key(suffix)));
    let kv_lora_rank = need("attention.kv_lora_rank")?;
    let rope = cfg.rotary_dim;
    let (qk, v_head_dim) = match get("attention.key_length_mla")? {
        Some(k) => (k, need("attention.value_length_mla")?),
        None => (cfg.head_dim, need("attention.value_length")?),
    };
    let qk_nope = qk.checked_sub(rope).filter(|&n| n > 0).ok_or_else(|| {
        ConfigError::Invalid(format!(
            "query/key width {qk} leaves nothing beside {rope} rotary dimensions"
        ))
    })?;
    let mut all_dim = None;
    if let Some(RopeScaling::Yarn {
        factor,
        attention_factor,
        ..
    }) = &mut cfg.rope_scaling
    {
        *attention_factor = 1.0;
        let log_mul = file
            .get_f32(&key("rope.scaling.yarn_log_multiplier"))
            .optional()?;
        all_dim = log_mul.map(|m| (f64::from(*factor), f64::from(m) / 0.1));
    }
    (cfg.n_kv_heads, cfg.head_dim) = (1, kv_lora_rank + rope);
    cfg.mla = Some(MlaConfig {
        q_lora_rank: get("attention.q_lora_rank")?.filter(|&r| r > 0),
        kv_lora_rank,
        qk_nope_head_dim: qk_nope,
        qk_rope_head_dim: rope,
        v_head_dim,
        softmax_scale: MlaConfig::scale_for(qk, all_dim),
    });
    if let Some(moe) = &mut cfg.moe {
        let shared = get("expert_shared_count")?.unwrap_or(0);
        moe.shared_expert_ffn = (shared > 0).then_some(shared * moe.expert_ffn);
        moe.routing = gguf_router_rule(file, arch)?;
    }
    Ok(())
}

fn gguf_router_rule(file: &GgufFile, arch: &str) -> Result<RouterRule, ConfigError> {
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let scoring = match file.get_u32(&key("expert_gating_func")).optional()? {
        None | Some(1) => Scoring::Softmax,
        Some(2) => Scoring::Sigmoid,
        Some(other) => {
            return Err(ConfigError::Unsupported(format!(
                "{} {other}",
                key("expert_gating_func")
            )))
        }
    };
    let groups = file.get_u64(&key("expert_group_count")).optional()?;
    let used = file.get_u64(&key("expert_group_used_count")).optional()?;
    let groups = match (groups, used) {
        (Some(n), Some(k)) if n > 1 => Some(ExpertGroups {
            n_groups: n as usize,
            top_groups: k as usize,
            score: GroupScore::TopTwoSum,
        }),
        _ => None,
    };
    let scale = file.get_f32(&key("expert_weights_scale")).optional()?;
    Ok(RouterRule {
        scoring,
        groups,
        scale: scale.unwrap_or(1.0),
    })
}
