//! [`Routing`]: which experts each token of a batch goes to, and with what weight, grouped by
//! expert so each expert runs once over all its tokens.
//!
//! Per token: softmax over every expert's router logit, keep the `top_k` largest (ties: the
//! lower expert index), and with `normalize` rescale the kept weights to sum to 1 (Mixtral,
//! Qwen3-MoE; Qwen2-MoE keeps the softmax values). DeepSeek's rules (sigmoid scores, a choice
//! bias, group-limited choice, scaled weights) are [`RouterRule`]s.

use crate::config::router_rule::MAX_GROUPS;
use crate::config::{ExpertGroups, GroupScore, RouterRule, Scoring};

/// The routing of one batch; buffers are reused across calls (they only grow).
#[derive(Debug, Default)]
pub struct Routing {
    /// Per token and rank: the chosen expert, `[tokens, top_k]`.
    picks: Vec<u32>,
    /// Their weights, `[tokens, top_k]`.
    weights: Vec<f32>,
    /// Expert `e`'s entries are `order[offsets[e]..offsets[e + 1]]`.
    offsets: Vec<usize>,
    /// Token indices grouped by expert (ascending token order within an expert).
    order: Vec<u32>,
    /// The routing weight of each `order` entry.
    order_weights: Vec<f32>,
    probs: Vec<f32>,
    /// The scores the choice ranks (bias added, excluded groups at −∞).
    choice: Vec<f32>,
    cursor: Vec<usize>,
    /// The eligible groups of one token.
    groups: Vec<usize>,
}

/// What [`Routing::route_with`] needs besides the logits.
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec<'a> {
    pub n_experts: usize,
    pub top_k: usize,
    /// Rescale the kept weights to sum to 1.
    pub normalize: bool,
    pub rule: RouterRule,
    /// Added to the scores for the choice only (DeepSeek V3's `e_score_correction_bias`).
    pub bias: Option<&'a [f32]>,
}

impl Routing {
    /// Route `t` tokens from their router logits `[t, n_experts]` by softmax and top-k.
    pub fn route(
        &mut self,
        logits: &[f32],
        t: usize,
        n_experts: usize,
        top_k: usize,
        normalize: bool,
    ) {
        let spec = RouteSpec {
            n_experts,
            top_k,
            normalize,
            rule: RouterRule::SOFTMAX,
            bias: None,
        };
        self.route_with(logits, t, &spec);
    }

    /// Route `t` tokens from their router logits `[t, n_experts]` by `spec`'s rule (the
    /// module docs of [`RouterRule`]).
    pub fn route_with(&mut self, logits: &[f32], t: usize, spec: &RouteSpec<'_>) {
        let (n_experts, top_k) = (spec.n_experts, spec.top_k);
        self.picks.clear();
        self.weights.clear();
        for row in logits[..t * n_experts].chunks_exact(n_experts) {
            self.probs.clear();
            self.probs.extend_from_slice(row);
            match spec.rule.scoring {
                Scoring::Softmax => softmax(&mut self.probs),
                Scoring::Sigmoid => self.probs.iter_mut().for_each(|v| *v = sigmoid(*v)),
            }
            self.choice.clear();
            self.choice.extend_from_slice(&self.probs);
            if let Some(bias) = spec.bias {
                self.choice.iter_mut().zip(bias).for_each(|(c, b)| *c += b);
            }
            if let Some(groups) = spec.rule.groups {
                keep_top_groups(&mut self.choice, groups, &mut self.groups);
            }
            let start = self.weights.len();
            for _ in 0..top_k {
                let e = argmax(&self.choice);
                self.picks.push(e as u32);
                self.weights.push(self.probs[e]);
                self.choice[e] = f32::NEG_INFINITY;
            }
            let kept = &mut self.weights[start..];
            if spec.normalize {
                let sum: f32 = kept.iter().sum();
                kept.iter_mut().for_each(|w| *w /= sum);
            }
            if spec.rule.scale != 1.0 {
                kept.iter_mut().for_each(|w| *w *= spec.rule.scale);
            }
        }
        self.group(t, n_experts, top_k);
    }

    /// Counting sort of the picks by expert.
    fn group(&mut self, t: usize, n_experts: usize, top_k: usize) {
        self.offsets.clear();
        self.offsets.resize(n_experts + 1, 0);
        for &e in &self.picks {
            self.offsets[e as usize + 1] += 1;
        }
        for e in 0..n_experts {
            self.offsets[e + 1] += self.offsets[e];
        }
        self.order.clear();
        self.order.resize(t * top_k, 0);
        self.order_weights.clear();
        self.order_weights.resize(t * top_k, 0.0);
        self.cursor.clear();
        self.cursor.extend_from_slice(&self.offsets[..n_experts]);
        for (i, (&e, &w)) in self.picks.iter().zip(&self.weights).enumerate() {
            let slot = self.cursor[e as usize];
            self.cursor[e as usize] += 1;
            self.order[slot] = (i / top_k) as u32;
            self.order_weights[slot] = w;
        }
    }

    /// Expert `e`'s tokens and their routing weights.
    pub fn expert(&self, e: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.offsets[e], self.offsets[e + 1]);
        (&self.order[a..b], &self.order_weights[a..b])
    }

    /// All picks grouped by expert: expert `e`'s entries are `offsets[e]..offsets[e + 1]` of
    /// the token indices and routing weights.
    pub fn grouped(&self) -> (&[usize], &[u32], &[f32]) {
        (&self.offsets, &self.order, &self.order_weights)
    }

    /// Token `i`'s chosen experts and weights (rank order).
    pub fn token(&self, i: usize, top_k: usize) -> (&[u32], &[f32]) {
        let r = i * top_k..(i + 1) * top_k;
        (&self.picks[r.clone()], &self.weights[r])
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Sets the scores of every expert outside the `top_groups` best groups to −∞ (`ranked`:
/// scratch for the group order).
fn keep_top_groups(choice: &mut [f32], g: ExpertGroups, ranked: &mut Vec<usize>) {
    let per_group = choice.len() / g.n_groups;
    let group_score = |grp: &[f32]| match g.score {
        GroupScore::Max => grp.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        GroupScore::TopTwoSum => {
            let first = argmax(grp);
            let second = grp
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != first)
                .map(|(_, &v)| v)
                .fold(f32::NEG_INFINITY, f32::max);
            grp[first] + second
        }
    };
    let mut scores: [f32; MAX_GROUPS] = [f32::NEG_INFINITY; MAX_GROUPS];
    for (s, grp) in scores.iter_mut().zip(choice.chunks_exact(per_group)) {
        *s = group_score(grp);
    }
    let scores = &mut scores[..g.n_groups.min(MAX_GROUPS)];
    ranked.clear();
    for _ in 0..g.top_groups {
        let best = argmax(scores);
        ranked.push(best);
        scores[best] = f32::NEG_INFINITY;
    }
    for (i, grp) in choice.chunks_exact_mut(per_group).enumerate() {
        if !ranked.contains(&i) {
            grp.fill(f32::NEG_INFINITY);
        }
    }
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
}

/// The first index of the largest value.
fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_top_k_and_groups_by_expert() {
        // 3 tokens, 4 experts, top-2.
        let logits = [
            0.0, 2.0, 1.0, -1.0, // experts 1, 2
            3.0, 0.0, 0.0, 2.5, // experts 0, 3
            0.0, 0.1, 5.0, 0.0, // experts 2, 1
        ];
        let mut r = Routing::default();
        r.route(&logits, 3, 4, 2, false);
        assert_eq!(r.token(0, 2).0, &[1, 2]);
        assert_eq!(r.token(1, 2).0, &[0, 3]);
        assert_eq!(r.token(2, 2).0, &[2, 1]);
        assert_eq!(r.expert(1).0, &[0, 2]);
        assert_eq!(r.expert(2).0, &[0, 2]);
        assert_eq!(r.expert(3).0, &[1]);
        let e: f32 = [0.0f32, 2.0, 1.0, -1.0].iter().map(|v| v.exp()).sum();
        assert!((r.token(0, 2).1[0] - 2f32.exp() / e).abs() < 1e-6);
        r.route(&logits, 3, 4, 2, true);
        let w = r.token(0, 2).1;
        assert!((w[0] + w[1] - 1.0).abs() < 1e-6);
        assert!((w[0] - 2f32.exp() / (2f32.exp() + 1f32.exp())).abs() < 1e-6);
    }
}
