//! [`ExpertActivation`]: how an expert combines its gate and up projections into the input of
//! its down projection.

/// The gated activation of a routed expert.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExpertActivation {
    /// `silu(gate) * up` (Mixtral, Qwen MoE).
    SiluGated,
    /// gpt-oss's clamped SwiGLU: `gate` clamped to `≤ limit`, `up` to `[−limit, limit]`, then
    /// `(up + 1) · gate · sigmoid(alpha · gate)` (transformers' `GptOssExperts._apply_gate`,
    /// llama.cpp's `swiglu_oai`).
    ClampedSwiglu { alpha: f32, limit: f32 },
}

impl ExpertActivation {
    /// gpt-oss's constants (transformers' `swiglu_alpha` / `swiglu_limit` defaults; llama.cpp
    /// hard-codes them, GGUF files do not store them).
    pub const GPT_OSS: ExpertActivation = ExpertActivation::ClampedSwiglu {
        alpha: 1.702,
        limit: 7.0,
    };

    /// `g[i] ← act(g[i], u[i])` over equal-length rows.
    pub fn apply(self, g: &mut [f32], u: &[f32]) {
        match self {
            ExpertActivation::SiluGated => kestrel_kernels::cpu::ops::silu_mul(g, u),
            ExpertActivation::ClampedSwiglu { alpha, limit } => {
                for (g, &u) in g.iter_mut().zip(u) {
                    let gate = g.min(limit);
                    let up = u.clamp(-limit, limit);
                    *g = (up + 1.0) * gate / (1.0 + (-alpha * gate).exp());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamped_swiglu_clamps_gate_above_and_up_on_both_sides() {
        let act = ExpertActivation::GPT_OSS;
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        let mut g = [0.5, 9.0, -9.0, 2.0];
        let u = [0.25, 1.0, 3.0, -20.0];
        act.apply(&mut g, &u);
        let want = [
            1.25 * 0.5 * sig(1.702 * 0.5),
            2.0 * 7.0 * sig(1.702 * 7.0),
            4.0 * -9.0 * sig(1.702 * -9.0),
            -6.0 * 2.0 * sig(1.702 * 2.0),
        ];
        for (g, w) in g.iter().zip(want) {
            assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}
