//! `kestrel inspect`: what is in a model file, without running it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kestrel_kernels::cpu::ops::RopeStyle;
use kestrel_model::arch::TensorNaming;
use kestrel_model::config::{
    ExpertActivation, GemmaConfig, MlaConfig, MlpKind, ModelConfig, NormKind, PositionEncoding,
    RopeScaling,
};
use kestrel_model::kv_cache::KvCacheShape;
use kestrel_model::weights::gguf::GgufFile;
use kestrel_model::weights::safetensors::SafetensorsCheckpoint;
use kestrel_model::weights::TensorSource;
use kestrel_model::KvDtype;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// A .gguf file or an HF checkpoint directory [default: the default model].
    pub model: Option<PathBuf>,
}

/// Per-type totals.
#[derive(Default)]
struct TypeTotals {
    tensors: usize,
    elements: u64,
    bytes: u64,
}

pub fn run(args: InspectArgs) -> Result<()> {
    let path = crate::resolve_model(args.model)?;
    let (naming, format, config, source, file_size, template): (
        TensorNaming,
        &str,
        ModelConfig,
        Box<dyn TensorSource>,
        u64,
        bool,
    ) = if path.is_dir() {
        let text =
            std::fs::read_to_string(path.join("config.json")).context("reading config.json")?;
        let ckpt = SafetensorsCheckpoint::open(&path)?;
        let size = ckpt
            .files()
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        let template = has_hf_template(&path);
        (
            TensorNaming::HuggingFace,
            "safetensors",
            ModelConfig::from_hf_json(&text)?,
            Box::new(ckpt),
            size,
            template,
        )
    } else {
        let file = GgufFile::open(&path)?;
        let size = file.file_size() as u64;
        let template = file.get("tokenizer.chat_template").is_some();
        let config = ModelConfig::from_gguf(&file)?;
        (
            TensorNaming::Gguf,
            if file.version() == 2 {
                "GGUF v2"
            } else {
                "GGUF v3"
            },
            config,
            Box::new(file),
            size,
            template,
        )
    };
    let totals = tensor_totals(source.as_ref());
    let features = features(&config, naming);
    let report = Report {
        path: &path,
        format,
        features: &features,
        totals: &totals,
        file_size,
        template,
    };
    print_report(&report, &config);
    Ok(())
}

fn has_hf_template(dir: &Path) -> bool {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let in_config = read("tokenizer_config.json")
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get("chat_template").is_some());
    in_config || dir.join("chat_template.jinja").exists()
}

fn tensor_totals(source: &dyn TensorSource) -> BTreeMap<&'static str, TypeTotals> {
    let mut totals: BTreeMap<&'static str, TypeTotals> = BTreeMap::new();
    for name in source.tensor_names() {
        if let Some(t) = source.tensor(&name) {
            let e = totals.entry(t.dtype.name()).or_default();
            e.tensors += 1;
            e.elements += t.n_elements() as u64;
            e.bytes += t.data.len() as u64;
        }
    }
    totals
}

/// What `print_report` shows besides the configuration.
struct Report<'a> {
    path: &'a Path,
    format: &'a str,
    features: &'a str,
    totals: &'a BTreeMap<&'static str, TypeTotals>,
    file_size: u64,
    template: bool,
}

/// The architecture's forward-pass features: position encoding (RoPE pairing or ALiBi),
/// BLOOM's block layout, biases, q/k norm, sliding window.
fn features(c: &ModelConfig, naming: TensorNaming) -> String {
    let layout = c.architecture.layout();
    let positions = match (layout.positions, naming.rope_style(c.architecture)) {
        (PositionEncoding::Alibi(a), _) => format!("ALiBi (max bias {})", a.max_bias),
        (PositionEncoding::Rope, RopeStyle::Interleaved) => {
            "RoPE interleaved (adjacent pairs)".to_string()
        }
        (PositionEncoding::Rope, RopeStyle::Neox) => "RoPE neox (rotate halves)".to_string(),
    };
    let mut out = vec![positions];
    if layout.positions == PositionEncoding::Rope {
        if c.rotary_dim != c.head_dim {
            out.push(format!(
                "partial rotary ({} of {} dims)",
                c.rotary_dim, c.head_dim
            ));
        }
        if let Some(s) = &c.rope_scaling {
            out.push(rope_scaling(s, c));
        }
    }
    if layout.norm == NormKind::Layer {
        out.push("LayerNorm".into());
    }
    if layout.mlp == MlpKind::PlainGelu {
        out.push("GELU MLP".into());
    }
    if layout.fused_qkv {
        out.push("fused QKV".into());
    }
    if c.attention_bias {
        out.push("q/k/v bias".into());
    }
    if c.qk_norm {
        out.push("q/k norm".into());
    }
    if c.architecture.has_attention_sinks() {
        out.push("attention sinks".into());
    }
    out.push(match c.sliding_window {
        None => "full attention".into(),
        Some(w) => match &c.window_layers {
            None => format!("sliding window {w} (every layer)"),
            Some(flags) => format!("sliding window {w} (layers {})", layer_list(flags)),
        },
    });
    if let Some(g) = &c.gemma {
        out.extend(gemma_features(c, g));
    }
    out.join(", ")
}

/// The RoPE scaling and its parameters, as `inspect` prints them.
fn rope_scaling(s: &RopeScaling, c: &ModelConfig) -> String {
    let attention = c.rope_attention_factor();
    match s {
        RopeScaling::Linear { factor } => format!("RoPE scaling linear x{factor}"),
        RopeScaling::Llama3 {
            factor,
            original_max_position,
            ..
        } => format!("RoPE scaling llama3 x{factor} from {original_max_position}"),
        RopeScaling::FreqFactors { factors } => {
            format!("RoPE frequency factors ({})", factors.len())
        }
        RopeScaling::Yarn {
            factor,
            original_max_position,
            ..
        } => format!(
            "RoPE scaling yarn x{factor} from {original_max_position} (attention x{attention:.4})"
        ),
        RopeScaling::DynamicNtk {
            factor,
            original_max_position,
        } => format!(
            "RoPE scaling dynamic NTK x{factor} from {original_max_position}, base set for {} positions",
            c.rope_context_length
        ),
        RopeScaling::LongRope {
            original_max_position,
            ..
        } => format!(
            "RoPE scaling longrope, {} factors for {} positions (original {original_max_position}, attention x{attention:.4})",
            match c.rope_context_length > *original_max_position {
                true => "long",
                false => "short",
            },
            c.rope_context_length
        ),
    }
}

/// Experts, top-k and shared expert of a sparse model.
fn moe_line(m: &kestrel_model::config::MoeConfig) -> String {
    let weights = match m.norm_topk_prob {
        true => "top-k weights renormalised",
        false => "softmax weights",
    };
    let shared = m
        .shared_expert_ffn
        .map_or("no shared expert".to_string(), |f| {
            format!("gated shared expert, ffn {f}")
        });
    let activation = match m.activation {
        ExpertActivation::SiluGated => "SiLU-gated".to_string(),
        ExpertActivation::ClampedSwiglu { alpha, limit } => {
            format!("clamped SwiGLU (limit {limit}, alpha {alpha})")
        }
    };
    format!(
        "experts:        {} per layer, top-{} (expert ffn {}, {activation}, {weights}, {shared}; sparse layers {})",
        m.n_experts,
        m.top_k,
        m.expert_ffn,
        layer_list(&m.sparse_layers)
    )
}

/// Gemma's additions: RoPE bases per layer kind, norms, GeGLU, scales and soft-caps.
fn gemma_features(c: &ModelConfig, g: &GemmaConfig) -> Vec<String> {
    let mut out = Vec::new();
    if c.sliding_window.is_some() {
        out.push(format!(
            "RoPE base {} local / {} global",
            g.local_rope_theta, c.rope_theta
        ));
    }
    out.push("pre+post norms (1 + w)".into());
    out.push("GeGLU (gelu tanh)".into());
    out.push(format!("embeddings x sqrt({})", c.hidden_size));
    out.push(format!("attention scale {:.6}", g.attention_scale));
    if let Some(cap) = g.attn_softcap {
        out.push(format!("attention softcap {cap}"));
    }
    if let Some(cap) = g.final_softcap {
        out.push(format!("final logit softcap {cap}"));
    }
    out
}

/// The indices of the set flags, runs written as ranges: `1-3, 5`.
fn layer_list(flags: &[bool]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, _) in flags.iter().enumerate().filter(|(_, &f)| f) {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => runs.push((i, i)),
        }
    }
    let text: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match a == b {
            true => a.to_string(),
            false => format!("{a}-{b}"),
        })
        .collect();
    text.join(", ")
}

fn print_report(r: &Report<'_>, c: &ModelConfig) {
    let (path, format, totals, file_size, template) =
        (r.path, r.format, r.totals, r.file_size, r.template);
    let params: u64 = totals.values().map(|t| t.elements).sum();
    let weight_bytes: u64 = totals.values().map(|t| t.bytes).sum();
    let kv_per_token = kv_bytes_per_token(c);
    let ctx = c.max_position_embeddings as u64;
    println!("model:          {}", path.display());
    println!("format:         {format}");
    println!("architecture:   {} ({})", c.architecture.name(), r.features);
    println!("parameters:     {} ({:.1} M)", params, params as f64 / 1e6);
    println!(
        "layers:         {} (hidden {}, ffn {}, heads {} / kv heads {}, head dim {})",
        c.n_layers, c.hidden_size, c.intermediate_size, c.n_heads, c.n_kv_heads, c.head_dim
    );
    if let Some(m) = &c.mla {
        println!("{}", latent_line(c, m));
    }
    if let Some(m) = &c.moe {
        println!("{}", moe_line(m));
    }
    println!("vocabulary:     {}", c.vocab_size);
    println!(
        "context length: {} (rope theta {})",
        c.max_position_embeddings, c.rope_theta
    );
    println!(
        "tied embedding: {}",
        if c.tie_word_embeddings { "yes" } else { "no" }
    );
    println!("tensor types:");
    for (name, t) in totals {
        let bpw = t.bytes as f64 * 8.0 / t.elements.max(1) as f64;
        println!(
            "  {name:<6} {:>4} tensors {:>12} weights {:>9.1} MiB ({bpw:.2} bits/weight)",
            t.tensors,
            t.elements,
            mib(t.bytes)
        );
    }
    println!("file size:      {:.1} MiB", mib(file_size));
    println!(
        "memory:         {:.1} MiB weights + KV cache {:.1} KiB/token ({kv_per_token} bytes; {:.1} MiB at the full {} context, f32)",
        mib(weight_bytes),
        kv_per_token as f64 / 1024.0,
        mib(kv_per_token * ctx),
        ctx
    );
    println!("chat template:  {}", template_origin(template, c));
}

/// f32 KV cache bytes per token over all layers, as the runner sizes the cache: K and V rows
/// of every kv head, or with latent attention one row (latent + rotary key) per layer.
fn kv_bytes_per_token(c: &ModelConfig) -> u64 {
    let shape = KvCacheShape {
        n_layers: c.n_layers,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        block_size: 1,
        num_blocks: 0,
        dtype: KvDtype::F32,
        keys_only: c.mla.is_some(),
    };
    shape.bytes_per_token() as u64
}

/// Latent attention's sizes and its cached row, beside what plain attention with the same
/// heads would cache.
fn latent_line(c: &ModelConfig, m: &MlaConfig) -> String {
    let f32_bytes = std::mem::size_of::<f32>();
    let plain = c.n_layers * c.n_heads * (m.qk_head_dim() + m.v_head_dim) * f32_bytes;
    let query = m
        .q_lora_rank
        .map_or("direct queries".to_string(), |r| format!("query rank {r}"));
    format!(
        "latent attn:    cached row per token and layer = latent {} + rope key {} ({} values; \
         {query}, nope/rope/value head dims {}/{}/{}); plain attention would cache {:.1} KiB/token",
        m.kv_lora_rank,
        m.qk_rope_head_dim,
        m.cached_dim(),
        m.qk_nope_head_dim,
        m.qk_rope_head_dim,
        m.v_head_dim,
        plain as f64 / 1024.0
    )
}

/// Which chat template chat routes use: the file's, else the family's built-in one.
fn template_origin(in_file: bool, c: &ModelConfig) -> String {
    match (in_file, c.architecture.builtin_chat_template()) {
        (true, _) => "present".into(),
        (false, Some(_)) => format!(
            "built-in {} template (the file has none)",
            c.architecture.name()
        ),
        (false, None) => "absent".into(),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
