//! [`LoraBatch`]: which token rows of one forward pass run with which adapter, and the
//! segment-wise application of their deltas after each base projection.
//!
//! ```text
//!   rows of the step:   s0 s0 s0 | s1 | s2 s2 | s3        (sequences stacked)
//!   adapters:            A        | -  | B     | A
//!   groups:   A → rows [0 1 2 6]   B → rows [4 5]         (base rows: no work)
//!   per projection:     y = x·Wᵀ for all rows (once)
//!                       for each group g: y[g] += scale_g · (x[g]·A_gᵀ)·B_gᵀ
//! ```
//!
//! With no adapter in the batch, [`LoraBatch::apply`] returns at its first branch.

use std::sync::Arc;

use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::executor::BatchInput;
use kestrel_kernels::cpu::gemm::Scratch;
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

    /// Add each group's delta for `site` to its rows of `site.y`.
    pub fn apply(
        &self,
        site: LoraSite<'_>,
        pool: &ThreadPool,
        s: &mut LoraScratch,
        scratch: &mut Scratch,
    ) {
        if self.groups.is_empty() {
            return;
        }
        for g in &self.groups {
            let Some(pair) = g.adapter.pair(site.layer, site.target) else {
                continue;
            };
            let (out, cols) = pair.shape();
            s.x.clear();
            for &r in &g.rows {
                s.x.extend_from_slice(&site.x[r * cols..(r + 1) * cols]);
            }
            let x = std::mem::take(&mut s.x);
            pair.product(pool, &x, g.rows.len(), s, scratch);
            s.x = x;
            for (i, &r) in g.rows.iter().enumerate() {
                let y = &mut site.y[r * out..(r + 1) * out];
                let d = &s.delta[i * out..(i + 1) * out];
                y.iter_mut().zip(d).for_each(|(y, d)| *y += d);
            }
        }
    }
}
