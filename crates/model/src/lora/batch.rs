//! [`LoraBatch`]: which token rows of one forward pass run with which adapter, and the
//! segment-wise application of their deltas after each base projection.
//!
//! ```text
//!   rows of the step:   s0 s0 s0 | s1 | s2 s2 | s3        (sequences stacked)
//!   adapters:            A        | -  | B     | A
//!   groups:   A → rows [0 1 2 6]   B → rows [4 5]         (base rows: no work)
//!   per projection:     y = x·Wᵀ for all rows (once)
//!                       y[g] += scale_g · (x[g]·A_gᵀ)·B_gᵀ for every group g, in one
//!                       low-rank update (`kestrel_kernels::cpu::low_rank`)
//! ```
//!
//! With no adapter in the batch, [`LoraBatch::apply`] returns at its first branch.

use std::sync::Arc;

use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::executor::BatchInput;
use kestrel_kernels::cpu::low_rank::low_rank_update;
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::adapter::LoraAdapter;
use super::pair::LoraScratch;
use super::registry::LoraRegistry;
use super::target::LoraTarget;

/// The rows of one adapter.
#[derive(Debug)]
struct Group {
    id: AdapterId,
    adapter: Arc<LoraAdapter>,
    rows: Vec<usize>,
}

/// The adapter groups of one step (empty: the base model alone).
#[derive(Debug, Default)]
pub struct LoraBatch {
    groups: Vec<Group>,
}

/// Which input and output the delta of one projection applies to.
pub struct LoraSite<'a> {
    pub layer: usize,
    pub target: LoraTarget,
    /// The projection's input, `[t, in]`.
    pub x: &'a [f32],
    /// The projection's output, `[t, out]`, to which the deltas are added.
    pub y: &'a mut [f32],
}

impl LoraBatch {
    /// No adapter: the base model alone.
    pub fn none() -> LoraBatch {
        LoraBatch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Group `batch`'s token rows by adapter, resolving ids in `registry`. Reuses this
    /// batch's allocations. Returns the first id the registry does not hold.
    pub fn resolve(
        &mut self,
        batch: &BatchInput,
        registry: &LoraRegistry,
    ) -> Result<(), AdapterId> {
        self.groups.iter_mut().for_each(|g| g.rows.clear());
        let mut row = 0;
        for s in &batch.seqs {
            let n = s.tokens.len();
            if let Some(id) = s.adapter {
                let g = match self.groups.iter().position(|g| g.id == id) {
                    Some(i) => &mut self.groups[i],
                    None => {
                        let adapter = registry.get(id).ok_or(id)?.clone();
                        self.groups.push(Group {
                            id,
                            adapter,
                            rows: Vec::new(),
                        });
                        self.groups.last_mut().ok_or(id)?
                    }
                };
                g.rows.extend(row..row + n);
            }
            row += n;
        }
        self.groups.retain(|g| !g.rows.is_empty());
        Ok(())
    }

    /// Add each group's delta for `site` to its rows of `site.y`: all the groups in one
    /// low-rank update (one pool call).
    pub fn apply(&self, site: LoraSite<'_>, pool: &ThreadPool, s: &mut LoraScratch) {
        let pick = |i: usize| {
            let g = &self.groups[i];
            let pair = g.adapter.pair(site.layer, site.target)?;
            (pair.rank() > 0).then(|| pair.group(&g.rows))
        };
        let n = self.groups.len();
        let Some((out, cols)) = (0..n).find_map(|i| {
            let pair = self.groups[i].adapter.pair(site.layer, site.target)?;
            (pair.rank() > 0).then(|| pair.shape())
        }) else {
            return;
        };
        low_rank_update(pool, &pick, n, (site.x, cols), (site.y, out), &mut s.u);
    }
}
