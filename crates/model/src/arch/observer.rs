//! [`ActivationObserver`]: a view of the inputs of every linear layer during a forward pass,
//! for calibration (activation-aware quantization) and analysis.

/// Where a linear layer's input is taken: the inputs shared by Q/K/V, by gate/up, and the
/// inputs of the attention output and down projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinearSite {
    Qkv,
    O,
    GateUp,
    Down,
}

impl LinearSite {
    pub const ALL: [LinearSite; 4] = [
        LinearSite::Qkv,
        LinearSite::O,
        LinearSite::GateUp,
        LinearSite::Down,
    ];

    /// The site whose input feeds the GGUF tensor `blk.N.<role>.weight`, if it is a layer linear.
    pub fn of_tensor(name: &str) -> Option<(usize, LinearSite)> {
        let rest = name.strip_prefix("blk.")?;
        let (layer, role) = rest.split_once('.')?;
        let site = match role.strip_suffix(".weight")? {
            "attn_q" | "attn_k" | "attn_v" => LinearSite::Qkv,
            "attn_output" => LinearSite::O,
            "ffn_gate" | "ffn_up" => LinearSite::GateUp,
            "ffn_down" => LinearSite::Down,
            _ => return None,
        };
        Some((layer.parse().ok()?, site))
    }
}

/// Sees the input rows of every linear layer during a forward pass.
pub trait ActivationObserver {
    /// `x` holds `m` rows, the input of the linear layers at `site` of layer `layer`.
    fn observe(&mut self, layer: usize, site: LinearSite, x: &[f32], m: usize);

    /// The queries and keys of layer `layer` after RoPE, for the batch's `m` tokens: `q` is
    /// `[m, heads.n_heads * head_dim]`, `k` is `[m, heads.n_kv_heads * head_dim]`.
    fn observe_attention(
        &mut self,
        _layer: usize,
        _q: &[f32],
        _k: &[f32],
        _m: usize,
        _heads: AttnHeads,
    ) {
    }
}

/// The attention shape an [`ActivationObserver`] sees.
#[derive(Debug, Clone, Copy)]
pub struct AttnHeads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Score scale (`1 / sqrt(head_dim)`).
    pub scale: f32,
}

/// The observer of an ordinary forward pass.
pub(crate) struct NoObserver;

impl ActivationObserver for NoObserver {
    fn observe(&mut self, _: usize, _: LinearSite, _: &[f32], _: usize) {}
}
