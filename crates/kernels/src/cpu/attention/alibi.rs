//! [`Alibi`]: linear position biases (ALiBi, Press et al. 2022) added to the attention scores
//! in place of rotary positions (BLOOM, MPT).
//!
//! Head `h` of `n` adds `slope_h · (key_pos − query_pos)` to its scaled score `scale · q·k`,
//! before the softmax. The bias is 0 on the diagonal and negative before it; adding
//! `slope_h · query_pos` to a whole row would not change its softmax, so this equals the
//! `slope_h · key_pos` that transformers' BLOOM adds, with smaller numbers at long contexts.
//!
//! The slopes are the geometric sequence of the paper, extended to head counts that are not a
//! power of two as transformers' `build_alibi_tensor` and llama.cpp do: with
//! `p = 2^⌊log2 n⌋`,
//!
//! ```text
//!   h <  p:  slope_h = (2^(−max_bias / p))^(h + 1)                 (p heads: the power-of-two rule)
//!   h >= p:  slope_h = (2^(−max_bias / 2p))^(2(h − p) + 1)         (odd powers of the 2p rule)
//! ```
//!
//! e.g. `max_bias` 8, 6 heads: 1/4, 1/16, 1/64, 1/256, then 1/2, 1/8.

/// ALiBi's parameter: the bias scale `max_bias` (8 in the paper, BLOOM and MPT's default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Alibi {
    pub max_bias: f32,
}

impl Alibi {
    /// The paper's (and BLOOM's) `max_bias` of 8.
    pub const STANDARD: Alibi = Alibi { max_bias: 8.0 };

    /// The slope of head `head` of `n_heads` (see the module docs).
    pub fn slope(self, head: usize, n_heads: usize) -> f32 {
        assert!(head < n_heads, "alibi: head {head} of {n_heads}");
        let p = 1usize << n_heads.ilog2();
        let max_bias = f64::from(self.max_bias);
        let (base, power) = if head < p {
            (-max_bias / p as f64, head + 1)
        } else {
            (-max_bias / (2 * p) as f64, 2 * (head - p) + 1)
        };
        (base * power as f64).exp2() as f32
    }

    /// The slopes of all `n_heads` heads.
    pub fn slopes(self, n_heads: usize) -> Vec<f32> {
        (0..n_heads).map(|h| self.slope(h, n_heads)).collect()
    }
}
