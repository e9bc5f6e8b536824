//! The expert-grouped MoE block ([`MoeBlock::moe_forward`]: route the whole batch, one product
//! per active expert over its gathered rows, weighted scatter back) against a naive per-token
//! reference written here with plain loops: every token's router softmax, top-k, optional
//! renormalisation, each chosen expert's SwiGLU MLP, and the gated shared expert. Random f32
//! weights; batches of 1 row (decode), 2 and 13 rows (prefill chunks and decode rows stacked),
//! with one expert that no token reaches; plus the routed-token counters.

use std::sync::Arc;

use kestrel_engine::expert_counts::ExpertTokenCounts;
use kestrel_kernels::cpu::gemm::Scratch;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::{DType, SharedBytes};
use kestrel_model::arch::moe_block::{
    ExpertCounter, ExpertMlp, MoeBlock, MoeScratch, SharedExpert,
};
use kestrel_model::layers::{Linear, RmsNorm};
use kestrel_model::weights::TensorView;

const HIDDEN: usize = 32;
const FFN: usize = 24;
const SHARED_FFN: usize = 40;
const EXPERTS: usize = 6;
/// No token is routed here: its router row is strongly negative.
const UNUSED: usize = 4;

/// Deterministic values in [-scale, scale).
struct Rng(u64);

impl Rng {
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }
}

/// A row-major `[rows, cols]` f32 matrix and its Linear.
struct Mat {
    w: Vec<f32>,
    cols: usize,
    linear: Linear,
}

fn mat(rng: &mut Rng, rows: usize, cols: usize) -> Mat {
    let w = rng.vec(rows * cols, 0.3);
    let view = TensorView {
        name: "w".into(),
        dtype: DType::F32,
        shape: vec![rows, cols],
        data: SharedBytes::from_f32(&w),
    };
    Mat {
        linear: Linear::new(view, None).unwrap().packed(),
        w,
        cols,
    }
}

impl Mat {
    fn apply(&self, x: &[f32]) -> Vec<f32> {
        self.w
            .chunks_exact(self.cols)
            .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    }
}

struct Expert {
    gate: Mat,
    up: Mat,
    down: Mat,
}

impl Expert {
    fn new(rng: &mut Rng, ffn: usize) -> Expert {
        Expert {
            gate: mat(rng, ffn, HIDDEN),
            up: mat(rng, ffn, HIDDEN),
            down: mat(rng, HIDDEN, ffn),
        }
    }

    fn apply(&self, x: &[f32]) -> Vec<f32> {
        let (g, u) = (self.gate.apply(x), self.up.apply(x));
        let h: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        self.down.apply(&h)
    }

    fn mlp(&self) -> ExpertMlp {
        ExpertMlp {
            gate: self.gate.linear.clone(),
            up: self.up.linear.clone(),
            down: self.down.linear.clone(),
        }
    }
}

struct Case {
    router: Mat,
    experts: Vec<Expert>,
    shared: Option<(Expert, Vec<f32>)>,
    top_k: usize,
    normalize: bool,
}

impl Case {
    fn new(seed: u64, top_k: usize, normalize: bool, shared: bool) -> Case {
        let mut rng = Rng(seed);
        let mut router = mat(&mut rng, EXPERTS, HIDDEN);
        router.w[UNUSED * HIDDEN..(UNUSED + 1) * HIDDEN].fill(0.0);
        let mut bias = vec![0.0; EXPERTS * HIDDEN];
        bias[UNUSED * HIDDEN] = -1.0; // with x[0] = 1 below: logit -1000
        router
            .w
            .iter_mut()
            .zip(&bias)
            .for_each(|(w, b)| *w += 1000.0 * b);
        router = rebuild(router);
        let experts = (0..EXPERTS).map(|_| Expert::new(&mut rng, FFN)).collect();
        let shared = shared.then(|| (Expert::new(&mut rng, SHARED_FFN), rng.vec(HIDDEN, 0.3)));
        Case {
            router,
            experts,
            shared,
            top_k,
            normalize,
        }
    }

    fn block(&self, counts: &Arc<ExpertTokenCounts>) -> MoeBlock {
        let norm_w = SharedBytes::from_f32(&[1.0; HIDDEN]);
        let norm = TensorView {
            name: "norm".into(),
            dtype: DType::F32,
            shape: vec![HIDDEN],
            data: norm_w,
        };
        MoeBlock {
            norm: RmsNorm::new(norm, 1e-6).unwrap(),
            router: self.router.linear.clone(),
            experts: self.experts.iter().map(Expert::mlp).collect(),
            top_k: self.top_k,
            normalize: self.normalize,
            shared: self.shared.as_ref().map(|(e, g)| SharedExpert {
                mlp: e.mlp(),
                gate: Some(g.clone()),
            }),
            counter: Some(ExpertCounter {
                counts: counts.clone(),
                slot: 0,
            }),
            activation: kestrel_model::config::ExpertActivation::SiluGated,
            rule: kestrel_model::config::RouterRule::SOFTMAX,
            score_bias: None,
        }
    }

    /// One token, the obvious way.
    fn naive(&self, x: &[f32]) -> Vec<f32> {
        let logits = self.router.apply(x);
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
        let sum: f32 = exps.iter().sum();
        let mut probs: Vec<(usize, f32)> = exps.iter().map(|e| e / sum).enumerate().collect();
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let chosen = &probs[..self.top_k];
        let kept: f32 = chosen.iter().map(|c| c.1).sum();
        let mut out = vec![0.0; HIDDEN];
        for &(e, p) in chosen {
            let w = if self.normalize { p / kept } else { p };
            let y = self.experts[e].apply(x);
            out.iter_mut().zip(&y).for_each(|(o, v)| *o += w * v);
        }
        if let Some((shared, gate)) = &self.shared {
            let dot: f32 = gate.iter().zip(x).map(|(a, b)| a * b).sum();
            let g = 1.0 / (1.0 + (-dot).exp());
            let y = shared.apply(x);
            out.iter_mut().zip(&y).for_each(|(o, v)| *o += g * v);
        }
        out
    }
}

fn rebuild(m: Mat) -> Mat {
    let rows = m.w.len() / m.cols;
    let view = TensorView {
        name: "router".into(),
        dtype: DType::F32,
        shape: vec![rows, m.cols],
        data: SharedBytes::from_f32(&m.w),
    };
    Mat {
        linear: Linear::new(view, None).unwrap(),
        ..m
    }
}

/// Rows of activations, each with x[0] = 1 (so the unused expert's logit is about -1000).
fn inputs(rng: &mut Rng, t: usize) -> Vec<f32> {
    let mut x = rng.vec(t * HIDDEN, 1.0);
    x.chunks_exact_mut(HIDDEN).for_each(|r| r[0] = 1.0);
    x
}

fn check(case: &Case, seed: u64) {
    let pool = ThreadPool::new(2);
    let counts = Arc::new(ExpertTokenCounts::new(vec![0], EXPERTS));
    let block = case.block(&counts);
    let mut s = MoeScratch::default();
    let mut scratch = Scratch::default();
    let mut rng = Rng(seed);
    let mut tokens = 0;
    // Decode (1 row), a short batch, a mixed batch; the same scratch reused throughout.
    for t in [1, 13, 2, 1] {
        let x = inputs(&mut rng, t);
        block.moe_forward(&pool, &x, t, &mut s, &mut scratch);
        let got = s.output(t * HIDDEN);
        for (r, row) in x.chunks_exact(HIDDEN).enumerate() {
            let want = case.naive(row);
            for (i, (g, w)) in got[r * HIDDEN..(r + 1) * HIDDEN]
                .iter()
                .zip(&want)
                .enumerate()
            {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "t={t} row {r} col {i}: grouped {g} vs naive {w}"
                );
            }
        }
        tokens += t;
    }
    let total: u64 = (0..EXPERTS).map(|e| counts.tokens(0, e)).sum();
    assert_eq!(total, (tokens * case.top_k) as u64, "tokens × top-k routed");
    assert_eq!(counts.tokens(0, UNUSED), 0, "the unused expert got tokens");
}

#[test]
fn grouped_equals_naive_top2_renormalised() {
    check(&Case::new(1, 2, true, false), 11);
}

#[test]
fn grouped_equals_naive_top3_softmax_weights_with_shared_expert() {
    check(&Case::new(2, 3, false, true), 12);
}

#[test]
fn grouped_equals_naive_top1() {
    check(&Case::new(3, 1, true, false), 13);
}
