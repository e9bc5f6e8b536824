//! [`MoeBlock`]: the sparse mixture-of-experts MLP half of a decoder layer (Mixtral, Qwen2-MoE,
//! Qwen3-MoE) — norm, router, the routed experts, an optional gated shared expert, and the
//! residual add.
//!
//! gpt-oss adds biases to the router and to every expert projection, and combines gate and
//! up with a clamped SwiGLU ([`ExpertActivation`]); experts with biases run one at a time.
//!
//! Expert-grouped, not per token: the whole batch is routed at once ([`Routing`]), the input
//! row of every (token, expert) pick is gathered into one buffer grouped by expert, each expert
//! runs its gate/up/down products once over all its rows, and the outputs are scattered back,
//! weighted, into the residual update. Experts with no tokens are skipped. With repacked
//! weights all experts run as segmented products (`matmul_packed_segments`): gate and up of
//! every expert in one pool call, down in another, so a decode step wakes the threads twice
//! per layer for its experts, not twice per expert. A GGUF layer's 3-D expert tensors are
//! sliced into per-expert matrices (views of the file's bytes), so quantized experts use the
//! same kernels as dense weights.

use std::sync::Arc;

use kestrel_engine::expert_counts::ExpertTokenCounts;
use kestrel_kernels::cpu::gemm::Scratch;
use kestrel_kernels::cpu::ops::add_assign;
use kestrel_kernels::cpu::packed::{can_share_input, matmul_packed_segments, PackedMatrix};
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::fused_experts::{self, ExpertDims};
use super::moe_naming::{HfMoeLayout, MoeTensor};
use super::router::{RouteSpec, Routing};
use super::tensor_loader::TensorLoader;
use super::workspace::Workspace;
use crate::config::{ExpertActivation, ModelConfig, MoeConfig, RouterRule};
use crate::error::ModelError;
use crate::layers::{to_f32_vec, Linear, RmsNorm};
use crate::weights::TensorView;

/// One expert: `down(act(gate(x), up(x)))`, `act` the layer's [`ExpertActivation`].
#[derive(Debug, Clone)]
pub struct ExpertMlp {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

impl ExpertMlp {
    fn ffn(&self) -> usize {
        self.gate.rows()
    }

    fn weight_bytes(&self) -> usize {
        self.gate.n_bytes() + self.up.n_bytes() + self.down.n_bytes()
    }

    /// `y[m × hidden]` for the `m` rows of `x`; `g`, `u` hold `m × ffn` each.
    fn forward(
        &self,
        act: ExpertActivation,
        pool: &ThreadPool,
        x: &[f32],
        m: usize,
        b: &mut ExpertBuffers<'_>,
    ) {
        let f = self.ffn();
        let (g, u) = (&mut b.g[..], &mut b.u[..]);
        Linear::forward_many([&self.gate, &self.up], pool, x, m, [g, u], b.scratch);
        act.apply(&mut b.g[..m * f], &b.u[..m * f]);
        self.down
            .forward(pool, &b.g[..m * f], m, &mut b.y[..], &mut *b.scratch);
    }
}

struct ExpertBuffers<'a> {
    g: &'a mut [f32],
    u: &'a mut [f32],
    y: &'a mut [f32],
    scratch: &'a mut Scratch,
}

/// The shared expert, with its scalar gate `sigmoid(gate · x)` (Qwen2-MoE) or without one
/// (DeepSeek's shared experts, added as they are).
#[derive(Debug, Clone)]
pub struct SharedExpert {
    pub mlp: ExpertMlp,
    pub gate: Option<Vec<f32>>,
}

/// Routed-token counting: the model's counters and this layer's slot in them.
#[derive(Debug, Clone)]
pub struct ExpertCounter {
    pub counts: Arc<ExpertTokenCounts>,
    pub slot: usize,
}

/// The buffers of the MoE layers, reused across layers and passes (they only grow).
#[derive(Debug, Default)]
pub struct MoeScratch {
    routing: Routing,
    logits: Vec<f32>,
    /// The input rows of every pick, grouped by expert (`Routing::grouped`).
    xe: Vec<f32>,
    /// Per pick: gate and up outputs (`g` then holds the activation), and the expert's output.
    g: Vec<f32>,
    u: Vec<f32>,
    y: Vec<f32>,
    /// The layer's output before the residual add.
    acc: Vec<f32>,
}

impl MoeScratch {
    /// The first `n` values of the last [`MoeBlock::moe_forward`]'s output.
    pub fn output(&self, n: usize) -> &[f32] {
        &self.acc[..n]
    }

    /// Room for `t` tokens and their `picks` (tokens × top-k) expert rows.
    fn reserve(&mut self, t: usize, picks: usize, hidden: usize, ffn: usize, experts: usize) {
        let rows = picks.max(t);
        grow(&mut self.logits, t * experts);
        grow(&mut self.xe, picks * hidden);
        grow(&mut self.g, rows * ffn);
        grow(&mut self.u, rows * ffn);
        grow(&mut self.y, rows * hidden);
        grow(&mut self.acc, t * hidden);
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// A sparse MLP layer.
#[derive(Debug, Clone)]
pub struct MoeBlock {
    pub norm: RmsNorm,
    pub router: Linear,
    pub experts: Vec<ExpertMlp>,
    pub top_k: usize,
    pub normalize: bool,
    pub shared: Option<SharedExpert>,
    pub counter: Option<ExpertCounter>,
    pub activation: ExpertActivation,
    /// How router logits become choices and weights.
    pub rule: RouterRule,
    /// Added to the scores for the choice only (DeepSeek V3).
    pub score_bias: Option<Vec<f32>>,
}

impl MoeBlock {
    /// Load layer `i`'s sparse MLP.
    pub(crate) fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        moe: &MoeConfig,
        counter: Option<ExpertCounter>,
    ) -> Result<MoeBlock, ModelError> {
        let h = cfg.hidden_size;
        let e = moe.n_experts;
        let loader = ExpertLoader { ld, cfg, layer: i };
        let experts = loader.all_experts(moe)?;
        let shared = match moe.shared_expert_ffn {
            Some(sf) => Some(loader.shared(sf)?),
            None => None,
        };
        Ok(MoeBlock {
            norm: ld.layer_norm(i, cfg.architecture.moe_norm(), h, cfg.rms_norm_eps)?,
            router: loader.router(e, h)?,
            experts,
            top_k: moe.top_k,
            normalize: moe.norm_topk_prob,
            shared,
            counter,
            activation: moe.activation,
            rule: moe.routing,
            score_bias: loader.score_bias(e)?,
        })
    }

    /// The stored bytes of the router, experts and shared expert.
    pub fn weight_bytes(&self) -> usize {
        let shared = self.shared.as_ref().map_or(0, |s| s.mlp.weight_bytes());
        self.router.n_bytes()
            + shared
            + self.experts.iter().map(|e| e.weight_bytes()).sum::<usize>()
    }

    /// The stored bytes one token reads: router, shared expert and `top_k` experts (of the
    /// experts' mean size).
    pub fn token_weight_bytes(&self) -> usize {
        let shared = self.shared.as_ref().map_or(0, |s| s.mlp.weight_bytes());
        let experts: usize = self.experts.iter().map(|e| e.weight_bytes()).sum();
        let routed = experts * self.top_k / self.experts.len().max(1);
        self.router.n_bytes() + shared + routed
    }

    fn max_ffn(&self) -> usize {
        let shared = self.shared.as_ref().map_or(0, |s| s.mlp.ffn());
        self.experts
            .iter()
            .map(|e| e.ffn())
            .max()
            .unwrap_or(0)
            .max(shared)
    }

    /// The layer's MLP over the `t` rows of the residual stream `ws.x`, added to it.
    pub fn forward(&self, hidden: usize, t: usize, ws: &mut Workspace, pool: &ThreadPool) {
        let n = t * hidden;
        self.norm.forward(&ws.x[..n], &mut ws.h[..n]);
        let s = &mut ws.moe;
        self.moe_forward(pool, &ws.h[..n], t, s, &mut ws.scratch);
        add_assign(&mut ws.x[..n], &s.acc[..n]);
    }

    /// The MoE output (without norm and residual) of the `t` rows of `x` into `s.acc`.
    pub fn moe_forward(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        t: usize,
        s: &mut MoeScratch,
        scratch: &mut Scratch,
    ) {
        let hidden = self.router.cols();
        let n_experts = self.experts.len();
        s.reserve(t, t * self.top_k, hidden, self.max_ffn(), n_experts);
        self.router.forward(pool, x, t, &mut s.logits, scratch);
        let spec = RouteSpec {
            n_experts,
            top_k: self.top_k,
            normalize: self.normalize,
            rule: self.rule,
            bias: self.score_bias.as_deref(),
        };
        s.routing.route_with(&s.logits, t, &spec);
        self.count_tokens(&s.routing);
        gather(&s.routing, x, hidden, &mut s.xe);
        match self.packed_experts() {
            Some(first) => self.run_packed(pool, first, s, scratch),
            None => self.run_each(pool, s, scratch),
        }
        s.acc[..t * hidden].fill(0.0);
        scatter(&s.routing, &s.y, hidden, &mut s.acc);
        if let Some(shared) = &self.shared {
            shared_forward(shared, pool, x, t, s, scratch);
        }
    }

    fn count_tokens(&self, routing: &Routing) {
        let Some(c) = &self.counter else { return };
        let (offsets, _, _) = routing.grouped();
        for (e, o) in offsets.windows(2).enumerate() {
            if o[1] > o[0] {
                c.counts.add(c.slot, e, (o[1] - o[0]) as u64);
            }
        }
    }

    /// The first expert's gate, up and down panels if every expert's three projections are
    /// plain repacked matrices of one shape, so that all experts run as segmented products.
    fn packed_experts(&self) -> Option<[&PackedMatrix; 3]> {
        let first = packed_projections(self.experts.first()?)?;
        let same = |a: &PackedMatrix, b: &PackedMatrix| {
            a.kind() == b.kind() && a.rows() == b.rows() && a.cols() == b.cols()
        };
        let all = self.experts.iter().all(|e| {
            packed_projections(e).is_some_and(|p| p.iter().zip(&first).all(|(a, b)| same(a, b)))
        });
        (all && can_share_input(&[first[0], first[1]])).then_some(first)
    }

    /// Every expert over its rows of `s.xe` into `s.y`, as two segmented products: gate and
    /// up of all experts in one pool call, then down of all experts in another.
    fn run_packed(
        &self,
        pool: &ThreadPool,
        first: [&PackedMatrix; 3],
        s: &mut MoeScratch,
        scratch: &mut Scratch,
    ) {
        let (offsets, _, _) = s.routing.grouped();
        let rows = offsets.last().copied().unwrap_or(0);
        let (hidden, ffn) = (first[2].rows(), first[0].rows());
        let expert = |e: usize| packed_projections(&self.experts[e]).unwrap_or(first);
        let gate_up = |e: usize| {
            let p = expert(e);
            [p[0], p[1]]
        };
        let (g, u) = (&mut s.g[..rows * ffn], &mut s.u[..rows * ffn]);
        let xe = &s.xe[..rows * hidden];
        matmul_packed_segments(pool, &gate_up, offsets, xe, [g, u], scratch);
        self.activation
            .apply(&mut s.g[..rows * ffn], &s.u[..rows * ffn]);
        let down = |e: usize| [expert(e)[2]];
        let y = &mut s.y[..rows * hidden];
        matmul_packed_segments(pool, &down, offsets, &s.g[..rows * ffn], [y], scratch);
    }

    /// Every expert over its rows of `s.xe` into `s.y`, one expert at a time (weights that are
    /// not repacked).
    fn run_each(&self, pool: &ThreadPool, s: &mut MoeScratch, scratch: &mut Scratch) {
        let hidden = self.router.cols();
        let MoeScratch {
            routing,
            xe,
            g,
            u,
            y,
            ..
        } = s;
        let (offsets, _, _) = routing.grouped();
        for (expert, o) in self.experts.iter().zip(offsets.windows(2)) {
            let (a, m) = (o[0], o[1] - o[0]);
            if m == 0 {
                continue;
            }
            let f = expert.ffn();
            let mut b = ExpertBuffers {
                g: &mut g[a * f..],
                u: &mut u[a * f..],
                y: &mut y[a * hidden..],
                scratch,
            };
            expert.forward(self.activation, pool, &xe[a * hidden..], m, &mut b);
        }
    }
}

/// An expert's gate, up and down as plain repacked matrices without bias, if they are.
fn packed_projections(e: &ExpertMlp) -> Option<[&PackedMatrix; 3]> {
    let layers = [&e.gate, &e.up, &e.down];
    if layers.iter().any(|l| l.has_bias()) {
        return None;
    }
    Some([
        e.gate.plain_packed()?,
        e.up.plain_packed()?,
        e.down.plain_packed()?,
    ])
}

/// The input rows of every pick, grouped by expert: `xe[i] = x[token of pick i]`.
fn gather(routing: &Routing, x: &[f32], hidden: usize, xe: &mut [f32]) {
    let (_, tokens, _) = routing.grouped();
    for (dst, &tok) in xe.chunks_exact_mut(hidden).zip(tokens) {
        let r = tok as usize * hidden;
        dst.copy_from_slice(&x[r..r + hidden]);
    }
}

/// `acc[token of pick i] += weight_i · y[i]`, picks in expert order.
fn scatter(routing: &Routing, y: &[f32], hidden: usize, acc: &mut [f32]) {
    let (_, tokens, weights) = routing.grouped();
    for ((row, &tok), &w) in y.chunks_exact(hidden).zip(tokens).zip(weights) {
        let r = tok as usize * hidden;
        let out = &mut acc[r..r + hidden];
        out.iter_mut().zip(row).for_each(|(a, v)| *a += w * v);
    }
}

/// `acc += sigmoid(gate · x) * shared(x)` for every row (`acc += shared(x)` without a gate).
fn shared_forward(
    shared: &SharedExpert,
    pool: &ThreadPool,
    x: &[f32],
    t: usize,
    s: &mut MoeScratch,
    scratch: &mut Scratch,
) {
    let hidden = shared.mlp.down.rows();
    let mut b = ExpertBuffers {
        g: &mut s.g,
        u: &mut s.u,
        y: &mut s.y,
        scratch,
    };
    shared
        .mlp
        .forward(ExpertActivation::SiluGated, pool, x, t, &mut b);
    for r in 0..t {
        let row = &x[r * hidden..(r + 1) * hidden];
        let w = match &shared.gate {
            Some(gate) => {
                let dot: f32 = row.iter().zip(gate).map(|(a, b)| a * b).sum();
                1.0 / (1.0 + (-dot).exp())
            }
            None => 1.0,
        };
        let out = &mut s.acc[r * hidden..(r + 1) * hidden];
        let y = &b.y[r * hidden..(r + 1) * hidden];
        out.iter_mut().zip(y).for_each(|(a, v)| *a += w * v);
    }
}

/// Loads one layer's expert tensors in either naming.
struct ExpertLoader<'a, 'b> {
    ld: &'a TensorLoader<'b>,
    cfg: &'a ModelConfig,
    layer: usize,
}

impl ExpertLoader<'_, '_> {
    fn name(&self, t: MoeTensor, expert: usize) -> String {
        self.ld
            .naming
            .moe(self.cfg.architecture, self.layer, t, expert)
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Linear, ModelError> {
        Ok(Linear::new(self.ld.get(name, &[rows, cols])?, None)?.packed())
    }

    /// The router, `[experts, hidden]`, with its bias where the source has one (gpt-oss).
    fn router(&self, n: usize, hidden: usize) -> Result<Linear, ModelError> {
        let weight = self
            .ld
            .get(&self.name(MoeTensor::Router, 0), &[n, hidden])?;
        let bias = self.bias(MoeTensor::Router, &[n])?;
        Ok(Linear::new(weight, bias)?.packed())
    }

    /// The values of `t`'s bias tensor of `shape`, if the source has it.
    fn bias(&self, t: MoeTensor, shape: &[usize]) -> Result<Option<Vec<f32>>, ModelError> {
        let arch = self.cfg.architecture;
        let name = self.ld.naming.moe_bias(arch, self.layer, t);
        match self.ld.has(&name) {
            true => Ok(Some(to_f32_vec(&self.ld.get(&name, shape)?)?)),
            false => Ok(None),
        }
    }

    /// Every routed expert of the layer.
    fn all_experts(&self, moe: &MoeConfig) -> Result<Vec<ExpertMlp>, ModelError> {
        let (h, e, f) = (self.cfg.hidden_size, moe.n_experts, moe.expert_ffn);
        let arch = self.cfg.architecture;
        let fused = arch.hf_moe_layout() == HfMoeLayout::FusedGateUp;
        if fused && self.ld.naming != super::naming::TensorNaming::Gguf {
            let dims = ExpertDims {
                n: e,
                hidden: h,
                ffn: f,
            };
            return fused_experts::load(self.ld, arch, self.layer, &dims);
        }
        let gates = self.experts(MoeTensor::ExpertGate, e, f, h)?;
        let ups = self.experts(MoeTensor::ExpertUp, e, f, h)?;
        let downs = self.experts(MoeTensor::ExpertDown, e, h, f)?;
        Ok(gates
            .into_iter()
            .zip(ups)
            .zip(downs)
            .map(|((gate, up), down)| ExpertMlp { gate, up, down })
            .collect())
    }

    /// The `n` experts' `[rows, cols]` matrices of `t`: slices of one `[n, rows, cols]` tensor
    /// (GGUF), or one tensor per expert (HF).
    fn experts(
        &self,
        t: MoeTensor,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<Linear>, ModelError> {
        match self.ld.naming {
            super::naming::TensorNaming::Gguf => {
                let view = self.ld.get(&self.name(t, 0), &[n, rows, cols])?;
                let biases = self.bias(t, &[n, rows])?;
                split_experts(view, n, rows, cols, biases)
            }
            super::naming::TensorNaming::HuggingFace
            | super::naming::TensorNaming::HfTable { .. } => {
                let experts = (0..n)
                    .map(|e| Linear::new(self.ld.get(&self.name(t, e), &[rows, cols])?, None))
                    .collect::<Result<Vec<_>, ModelError>>()?;
                Ok(Linear::packed_group(experts))
            }
        }
    }

    fn shared(&self, ffn: usize) -> Result<SharedExpert, ModelError> {
        let h = self.cfg.hidden_size;
        let mlp = ExpertMlp {
            gate: self.matrix(&self.name(MoeTensor::SharedGate, 0), ffn, h)?,
            up: self.matrix(&self.name(MoeTensor::SharedUp, 0), ffn, h)?,
            down: self.matrix(&self.name(MoeTensor::SharedDown, 0), h, ffn)?,
        };
        let name = self.name(MoeTensor::SharedExpertGate, 0);
        let gated = self.cfg.architecture.hf_moe_layout() != HfMoeLayout::SharedExperts;
        if !gated {
            return Ok(SharedExpert { mlp, gate: None });
        }
        let view = self
            .ld
            .src
            .tensor(&name)
            .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
        if view.n_elements() != h {
            return Err(ModelError::BadShape {
                name,
                expected: vec![1, h],
                actual: view.shape,
            });
        }
        Ok(SharedExpert {
            mlp,
            gate: Some(to_f32_vec(&view)?),
        })
    }

    /// The router's choice bias, `[experts]`, if the source has it.
    fn score_bias(&self, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
        let name = self.ld.naming.moe_score_bias(self.layer);
        match self.ld.has(&name) {
            true => Ok(Some(to_f32_vec(&self.ld.get(&name, &[n])?)?)),
            false => Ok(None),
        }
    }
}

/// The `n` `[rows, cols]` matrices of a stacked `[n, rows, cols]` tensor (views of its bytes),
/// repacked together, with their rows of `biases` (`[n, rows]`) when given.
fn split_experts(
    view: TensorView,
    n: usize,
    rows: usize,
    cols: usize,
    biases: Option<Vec<f32>>,
) -> Result<Vec<Linear>, ModelError> {
    let bad = |reason: String| ModelError::BadTensor {
        name: view.name.clone(),
        reason,
    };
    let row_bytes = view.dtype.row_bytes(cols).ok_or_else(|| {
        bad(format!(
            "{cols} columns is not a multiple of the {} block size",
            view.dtype
        ))
    })?;
    let per_expert = rows * row_bytes;
    if view.data.len() != n * per_expert {
        return Err(bad(format!(
            "{} bytes of data, expected {}",
            view.data.len(),
            n * per_expert
        )));
    }
    (0..n)
        .map(|e| {
            let data = view
                .data
                .slice(e * per_expert..(e + 1) * per_expert)
                .ok_or_else(|| bad(format!("expert {e} is out of the tensor's bytes")))?;
            let part = TensorView {
                name: format!("{}[{e}]", view.name),
                dtype: view.dtype,
                shape: vec![rows, cols],
                data,
            };
            let bias = biases
                .as_ref()
                .map(|b| b[e * rows..(e + 1) * rows].to_vec());
            Linear::new(part, bias)
        })
        .collect::<Result<Vec<_>, ModelError>>()
        .map(Linear::packed_group)
}
