//! [`RouterRule`]: how a sparse layer turns router logits into expert choices and weights.
//!
//! * Softmax (Mixtral, Qwen MoE, gpt-oss, DeepSeek V2): probabilities over all experts, the
//!   top `k` kept (renormalized when the config says so).
//! * Sigmoid (DeepSeek V3): independent scores `sigmoid(logit)`; the choice ranks
//!   `score + bias` (`e_score_correction_bias`), the weights are the chosen scores without the
//!   bias (renormalized when the config says so).
//!
//! Group-limited routing (DeepSeek): the experts form `n_groups` equal groups; each group is
//! ranked by its best score (V2's `group_limited_greedy`) or by the sum of its two best
//! (V3), only the `top_groups` best groups stay eligible. Last, every weight is multiplied by
//! `scale` (`routed_scaling_factor`, 1 elsewhere).

use super::ConfigError;

/// Most expert groups a router may have (DeepSeek V2 and V3 have 8).
pub const MAX_GROUPS: usize = 64;

/// Softmax or sigmoid scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoring {
    Softmax,
    Sigmoid,
}

/// How a group of experts is ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupScore {
    /// Its best expert's score (DeepSeek V2).
    Max,
    /// The sum of its two best scores (DeepSeek V3).
    TopTwoSum,
}

/// Group-limited routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertGroups {
    pub n_groups: usize,
    pub top_groups: usize,
    pub score: GroupScore,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouterRule {
    pub scoring: Scoring,
    pub groups: Option<ExpertGroups>,
    /// Multiplies every routing weight.
    pub scale: f32,
}

impl RouterRule {
    /// Softmax, no groups, no scaling.
    pub const SOFTMAX: RouterRule = RouterRule {
        scoring: Scoring::Softmax,
        groups: None,
        scale: 1.0,
    };

    /// Check the rule against the layer's expert count and top-k.
    pub fn validate(&self, n_experts: usize, top_k: usize) -> Result<(), ConfigError> {
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(ConfigError::Invalid(format!(
                "routed scaling factor {} is not a positive number",
                self.scale
            )));
        }
        let Some(g) = self.groups else {
            return Ok(());
        };
        let fits = (1..=MAX_GROUPS).contains(&g.n_groups)
            && n_experts.is_multiple_of(g.n_groups)
            && (1..=g.n_groups).contains(&g.top_groups);
        if !fits {
            return Err(ConfigError::Invalid(format!(
                "{} expert groups (top {}) for {n_experts} experts",
                g.n_groups, g.top_groups
            )));
        }
        let per_group = n_experts / g.n_groups;
        if g.score == GroupScore::TopTwoSum && per_group < 2 {
            return Err(ConfigError::Invalid(format!(
                "groups of {per_group} expert cannot be ranked by their two best scores"
            )));
        }
        if g.top_groups * per_group < top_k {
            return Err(ConfigError::Invalid(format!(
                "{} groups of {per_group} experts hold fewer than the {top_k} experts per token",
                g.top_groups
            )));
        }
        Ok(())
    }
}
