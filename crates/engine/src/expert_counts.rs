//! [`ExpertTokenCounts`]: how many tokens a mixture-of-experts model routed to each expert of
//! each sparse layer. The model counts into it while it runs (relaxed atomic adds, one per
//! layer and active expert per step); the engine publishes it as
//! `kestrel:moe_expert_tokens_total{layer,expert}`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Cumulative routed-token counters, one per (sparse layer, expert).
#[derive(Debug)]
pub struct ExpertTokenCounts {
    /// The model's layer number of each counted (sparse) layer, in order.
    layers: Vec<usize>,
    experts: usize,
    counts: Box<[AtomicU64]>,
}

impl ExpertTokenCounts {
    /// Zeroed counters for `experts` experts in each of `layers` (model layer numbers).
    pub fn new(layers: Vec<usize>, experts: usize) -> ExpertTokenCounts {
        let counts = (0..layers.len() * experts)
            .map(|_| AtomicU64::new(0))
            .collect();
        ExpertTokenCounts {
            layers,
            experts,
            counts,
        }
    }

    /// The model layer numbers of the counted layers.
    pub fn layers(&self) -> &[usize] {
        &self.layers
    }

    pub fn experts(&self) -> usize {
        self.experts
    }

    /// Number of counters (`layers × experts`); counter `i` is slot `i / experts`, expert
    /// `i % experts`.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Add `tokens` to expert `expert` of counted layer `slot` (an index into [`layers`](Self::layers)).
    pub fn add(&self, slot: usize, expert: usize, tokens: u64) {
        if let Some(c) = self.counts.get(slot * self.experts + expert) {
            c.fetch_add(tokens, Ordering::Relaxed);
        }
    }

    /// Counter `i` (see [`len`](Self::len)).
    pub fn get(&self, i: usize) -> u64 {
        self.counts.get(i).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Tokens routed to `expert` of counted layer `slot`.
    pub fn tokens(&self, slot: usize, expert: usize) -> u64 {
        self.get(slot * self.experts + expert)
    }
}
