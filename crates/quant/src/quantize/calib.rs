//! [`calibrate`]: run a model over calibration text and record, for the input of every
//! linear layer, what activation-aware quantizers need:
//!
//! * the mean magnitude of each input channel (AWQ's saliency measure),
//! * the largest magnitude of each input channel (SmoothQuant's migration strength),
//! * a sample of input rows (to score candidate AWQ scales by the output error they cause),
//! * optionally `H = Σ x xᵀ` over all rows (GPTQ's Hessian, up to the factor `2 / n`), and for
//!   the V projection the attention-weighted `Σ w_j x_j x_jᵀ` ([`key_weights`]).
//!
//! Statistics come from the unquantized model (the inputs a full-precision layer sees); the
//! layers are not re-run with their quantized predecessors.

use std::collections::BTreeMap;

use kestrel_engine::executor::{BatchInput, SeqBatch};
use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;
use kestrel_model::arch::{
    ActivationObserver, AttnHeads, DecoderModel, LinearSite, Pass, Workspace,
};
use kestrel_model::kv_cache::{KvCache, KvCacheShape};

use super::attn_weights::{key_weights, KeyWeightScratch};

/// How much calibration to do.
#[derive(Debug, Clone, Copy)]
pub struct CalibConfig {
    /// Tokens of calibration text to run (rounded down to whole windows).
    pub tokens: usize,
    /// Window length: the text is cut into independent sequences of this many tokens.
    pub ctx: usize,
    /// Input rows kept per site for scoring (taken evenly from every window).
    pub sample_rows: usize,
    /// Whether to accumulate `Σ x xᵀ`.
    pub hessian: bool,
}

/// What was seen at one site's input.
#[derive(Debug, Clone)]
pub struct SiteStats {
    pub cols: usize,
    /// Rows seen.
    pub rows: usize,
    /// `Σ |x_c|` per channel.
    pub abs_sum: Vec<f64>,
    /// `max |x_c|` per channel.
    pub abs_max: Vec<f32>,
    /// Sampled rows, `[n, cols]`.
    pub sample: Vec<f32>,
    /// `Σ x xᵀ`, `[cols, cols]`, when requested.
    pub hessian: Option<Vec<f32>>,
    /// At the Q/K/V input, with the Hessian: `Σ_j w_j x_j x_jᵀ`, token `j` weighted by the
    /// attention it receives ([`key_weights`]), the V projection's Hessian.
    pub value_hessian: Option<Vec<f32>>,
}

impl SiteStats {
    fn new(cols: usize, hessian: bool) -> SiteStats {
        SiteStats {
            cols,
            rows: 0,
            abs_sum: vec![0.0; cols],
            abs_max: vec![0.0; cols],
            sample: Vec::new(),
            hessian: hessian.then(|| vec![0.0; cols * cols]),
            value_hessian: None,
        }
    }

    /// Mean `|x_c|` per channel.
    pub fn mean_abs(&self) -> Vec<f32> {
        let n = self.rows.max(1) as f64;
        self.abs_sum.iter().map(|s| (s / n) as f32).collect()
    }

    /// Sampled rows.
    pub fn sample_rows(&self) -> usize {
        self.sample.len() / self.cols
    }
}

/// Statistics of every (layer, site).
#[derive(Debug, Clone, Default)]
pub struct Calibration {
    pub sites: BTreeMap<(usize, LinearSite), SiteStats>,
    /// Tokens run.
    pub tokens: usize,
}

impl Calibration {
    pub fn site(&self, layer: usize, site: LinearSite) -> Option<&SiteStats> {
        self.sites.get(&(layer, site))
    }
}

/// Run `model` over `tokens` in windows of `cfg.ctx` and collect [`Calibration`].
pub fn calibrate(
    model: &DecoderModel,
    tokens: &[u32],
    cfg: CalibConfig,
    pool: &ThreadPool,
) -> Calibration {
    let ctx = cfg.ctx.max(1);
    let windows: Vec<&[u32]> = tokens
        .chunks_exact(ctx)
        .take((cfg.tokens / ctx).max(1))
        .collect();
    let mut obs = Collector {
        cfg,
        sites: BTreeMap::new(),
        per_window: cfg.sample_rows.div_ceil(windows.len().max(1)),
        pool,
        gram: Gram::default(),
        qkv_input: Vec::new(),
        weighted: Vec::new(),
        key_scratch: KeyWeightScratch::default(),
    };
    let block_size = 16;
    let d = model.dims();
    let shape = KvCacheShape {
        n_layers: d.n_layers,
        n_kv_heads: d.n_kv_heads,
        head_dim: d.head_dim,
        block_size,
        num_blocks: ctx.div_ceil(block_size),
        dtype: Default::default(),
        keys_only: d.keys_only,
    };
    let mut kv = KvCache::new(shape);
    let mut ws = Workspace::default();
    let mut logits = Vec::new();
    let mut run = 0;
    for w in &windows {
        let batch = BatchInput {
            seqs: vec![SeqBatch {
                request_id: 0,
                tokens: w.to_vec(),
                start_pos: 0,
                block_table: (0..shape.num_blocks as u32).collect(),
                num_logits: 0,
                adapter: None,
            }],
        };
        let pass = Pass {
            batch: &batch,
            lora: &kestrel_model::lora::LoraBatch::none(),
            kv: &mut kv,
            ws: &mut ws,
            pool,
        };
        model.forward_observed(pass, &[], &mut logits, &mut obs);
        run += w.len();
    }
    Calibration {
        sites: obs.sites,
        tokens: run,
    }
}

struct Collector<'p> {
    cfg: CalibConfig,
    sites: BTreeMap<(usize, LinearSite), SiteStats>,
    per_window: usize,
    pool: &'p ThreadPool,
    gram: Gram,
    /// The current layer's Q/K/V input, kept for [`observe_attention`](ActivationObserver::observe_attention).
    qkv_input: Vec<f32>,
    weighted: Vec<f32>,
    key_scratch: KeyWeightScratch,
}

impl ActivationObserver for Collector<'_> {
    fn observe(&mut self, layer: usize, site: LinearSite, x: &[f32], m: usize) {
        if m == 0 {
            return;
        }
        let cols = x.len() / m;
        let stats = self
            .sites
            .entry((layer, site))
            .or_insert_with(|| SiteStats::new(cols, self.cfg.hessian));
        stats.rows += m;
        for row in x.chunks_exact(cols) {
            stats
                .abs_sum
                .iter_mut()
                .zip(row)
                .for_each(|(s, v)| *s += v.abs() as f64);
            stats
                .abs_max
                .iter_mut()
                .zip(row)
                .for_each(|(m, v)| *m = m.max(v.abs()));
        }
        let step = (m / self.per_window.max(1)).max(1);
        for row in x.chunks_exact(cols).step_by(step).take(self.per_window) {
            stats.sample.extend_from_slice(row);
        }
        if let Some(h) = stats.hessian.as_mut() {
            self.gram.add(self.pool, x, m, cols, h);
            if site == LinearSite::Qkv {
                self.qkv_input.clear();
                self.qkv_input.extend_from_slice(x);
            }
        }
    }

    /// Each window is one sequence from position 0 (see [`calibrate`]).
    fn observe_attention(
        &mut self,
        layer: usize,
        q: &[f32],
        k: &[f32],
        m: usize,
        heads: AttnHeads,
    ) {
        let Some(stats) = self.sites.get_mut(&(layer, LinearSite::Qkv)) else {
            return;
        };
        if !self.cfg.hessian || self.qkv_input.len() != m * stats.cols {
            return;
        }
        let cols = stats.cols;
        let w = key_weights(self.pool, q, k, m, heads, &mut self.key_scratch);
        self.weighted.clear();
        for (row, wj) in self.qkv_input.chunks_exact(cols).zip(&w) {
            let r = wj.sqrt();
            self.weighted.extend(row.iter().map(|v| v * r));
        }
        let h = stats
            .value_hessian
            .get_or_insert_with(|| vec![0.0; cols * cols]);
        self.gram.add(self.pool, &self.weighted, m, cols, h);
    }
}

/// The buffers of [`Gram::add`], reused across calls.
#[derive(Default)]
struct Gram {
    /// `xᵀ`, `[cols, m]`.
    transposed: Vec<f32>,
    /// `xᵀ x`, `[cols, cols]`.
    product: Vec<f32>,
    scratch: Scratch,
}

impl Gram {
    /// `h += xᵀ x` for `x` of `m` rows × `cols`, with the f32 matrix kernels: the product of
    /// `xᵀ` with itself, row by row.
    fn add(&mut self, pool: &ThreadPool, x: &[f32], m: usize, cols: usize, h: &mut [f32]) {
        let xt = &mut self.transposed;
        xt.resize(cols * m, 0.0);
        for (i, row) in x.chunks_exact(cols).enumerate() {
            for (c, v) in row.iter().enumerate() {
                xt[c * m + i] = *v;
            }
        }
        self.product.resize(cols * cols, 0.0);
        let w = MatRef {
            dtype: DType::F32,
            rows: cols,
            cols: m,
            data: bytemuck::cast_slice(xt),
        };
        matmul(pool, w, xt, cols, &mut self.product, &mut self.scratch);
        h.iter_mut()
            .zip(self.product.iter())
            .for_each(|(a, b)| *a += b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gram_matches_direct_sum() {
        let pool = ThreadPool::new(2);
        let (m, cols) = (5, 7);
        let x: Vec<f32> = (0..m * cols)
            .map(|i| ((i * 13 % 17) as f32 - 8.0) / 4.0)
            .collect();
        let mut h = vec![1.0; cols * cols];
        Gram::default().add(&pool, &x, m, cols, &mut h);
        for i in 0..cols {
            for j in 0..cols {
                let want: f32 = 1.0
                    + (0..m)
                        .map(|r| x[r * cols + i] * x[r * cols + j])
                        .sum::<f32>();
                assert!(
                    (h[i * cols + j] - want).abs() < 1e-4,
                    "({i},{j}) {} vs {want}",
                    h[i * cols + j]
                );
            }
        }
    }
}
