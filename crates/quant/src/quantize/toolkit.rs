//! [`quantize_with`]: every [`QuantMethod`], including the calibrated ones, to a GGUF writer.
//!
//! * GGUF block types, INT4 (RTN) and NF4 convert each tensor on its own.
//! * INT8 (with `outliers > 0`) splits off each linear layer's input channels of largest
//!   activation magnitude, measured on the calibration text or, without text, on pseudo-random
//!   token windows (F16 weights beside the INT8 matrix, metadata array
//!   `kestrel.outlier_cols.<tensor name>`, tensor `<name>.outlier_weight`). With calibration
//!   text, optional SmoothQuant smoothing comes first ([`Smoothing`]: one α, or per site the α
//!   among 0.3..0.8 or none whose W8A8 output error on the sampled rows is smallest).
//! * AWQ first runs calibration text through the unquantized model, searches per-layer input
//!   scales ([`awq`](super::awq)), folds them into the norms and up projections, then
//!   quantizes group-wise INT4.
//! * GPTQ runs calibration with Hessian accumulation, then quantizes every layer linear with
//!   [`gptq`](super::gptq::gptq), the V projections with the attention-weighted Hessian
//!   ([`key_weights`](super::attn_weights::key_weights)). With `act_order` each tensor's column
//!   permutation is stored as the metadata array `kestrel.input_perm.<tensor name>` (u32).

use std::collections::HashMap;
use std::path::Path;

use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;
use kestrel_model::arch::LinearSite;
use kestrel_model::weights::gguf::{
    GgufWriter, MetaArray, MetaValue, INPUT_PERM_KEY_PREFIX, OUTLIER_COLS_KEY_PREFIX,
};
use kestrel_model::weights::outlier_weight_name;

use super::awq::{scale_columns, search_scales, search_smoothing, unscale_rows, AwqConfig, Weight};
use super::calib::{calibrate, CalibConfig, Calibration, SiteStats};
use super::gptq::{gptq_prepared, prepare, GptqConfig, Prepared};
use super::outliers::{choose_channels, split_off};
use super::{QuantMethod, QuantOptions, QuantizeError, Smoothing};
use crate::codec::encode_threads;
use crate::codec::rtn::GridKind;
use crate::codec::{pack, PackedLinear};
use crate::convert::{retype_with, ModelSource, SourceTensor};
use crate::plan::TensorPlan;

/// Metadata key naming the method that produced a file.
pub const METHOD_KEY: &str = "kestrel.quantization.method";

/// Calibration input for AWQ and GPTQ.
#[derive(Debug, Clone)]
pub struct CalibText {
    pub text: String,
    /// Tokens to use (whole windows of `ctx`).
    pub tokens: usize,
    pub ctx: usize,
}

/// Progress callbacks.
pub struct Progress<'a> {
    /// A stage starts ("calibrating", "searching AWQ scales", "quantizing").
    pub stage: &'a mut dyn FnMut(&str),
    /// A tensor was written.
    pub tensor: &'a mut dyn FnMut(&TensorPlan),
}

/// Quantize the model at `path` (already opened as `source`) with `method`.
pub fn quantize_with(
    path: &Path,
    source: &ModelSource,
    method: QuantMethod,
    opts: &QuantOptions,
    calib: Option<&CalibText>,
    progress: Progress<'_>,
) -> Result<GgufWriter, QuantizeError> {
    opts.validate(method)?;
    let pool = ThreadPool::global();
    let int8 = method == QuantMethod::Int8;
    if int8 && calib.is_none() && opts.smoothing != Smoothing::Off {
        return Err(QuantizeError::NeedsCalibration {
            method: "int8 with SmoothQuant",
        });
    }
    let stats = match calib {
        None if method.needs_calibration() => {
            return Err(QuantizeError::NeedsCalibration {
                method: method.name(),
            })
        }
        None if int8 && opts.outliers > 0 => {
            (progress.stage)("finding outlier channels on random tokens");
            Some(run_calibration(path, CalibInput::Random, false, pool)?)
        }
        Some(c) if method.needs_calibration() || int8 => {
            (progress.stage)("calibrating");
            Some(run_calibration(
                path,
                CalibInput::Text(c),
                method == QuantMethod::Gptq,
                pool,
            )?)
        }
        _ => None,
    };
    let mut overrides = HashMap::new();
    let mut outlier_sets = HashMap::new();
    match (method, &stats) {
        (QuantMethod::Awq, Some(s)) => {
            (progress.stage)("searching AWQ scales");
            let choose = |st: &SiteStats, ws: &[Weight<'_>], cols: usize| {
                let group = QuantMethod::Awq.dtype(opts, cols).block_size();
                let cfg = AwqConfig {
                    group,
                    kind: GridKind::Asymmetric(4),
                    n_grid: opts.awq_grid,
                };
                search_scales(pool, &st.sample, &st.mean_abs(), ws, cfg).0
            };
            overrides = fold_scales(source, s, &choose, false)?.0;
        }
        (QuantMethod::Int8, Some(s)) => {
            let mut scales = HashMap::new();
            if let Some(alphas) = smoothing_alphas(opts.smoothing).filter(|_| calib.is_some()) {
                (progress.stage)("smoothing activations");
                let choose = |st: &SiteStats, ws: &[Weight<'_>], _: usize| {
                    search_smoothing(pool, &st.sample, &st.abs_max, ws, &alphas)
                };
                (overrides, scales) = fold_scales(source, s, &choose, true)?;
            }
            outlier_sets = choose_outliers(s, &scales, opts.outliers);
        }
        _ => {}
    }
    (progress.stage)("quantizing");
    let mut perms: Vec<(String, Vec<u32>)> = Vec::new();
    let mut splits: Vec<SplitTensor> = Vec::new();
    // Keyed by site and whether the tensor is the V projection (its own Hessian).
    let mut prepared: HashMap<(usize, LinearSite, bool), Prepared> = HashMap::new();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut encode = |t: &SourceTensor| -> Result<(DType, Vec<u8>), QuantizeError> {
        let to = method.tensor_type_with(&t.name, t.shape(), opts);
        if let Some(raw) = t
            .gguf_bytes()
            .filter(|_| to == t.dtype() && !overrides.contains_key(&t.name))
        {
            return Ok((to, raw.to_vec()));
        }
        let mut values = match overrides.remove(&t.name) {
            Some(v) => v,
            None => t.to_f32()?,
        };
        let site = LinearSite::of_tensor(&t.name);
        match (method, site, &stats) {
            (QuantMethod::Gptq, Some((layer, site)), Some(s)) if to != DType::Q8_0 => {
                let key = (layer, site, is_value_projection(&t.name));
                if !prepared.contains_key(&key) {
                    prepared.clear();
                    let prep = prepare_site(t, s.site(layer, site), key.2, opts)?;
                    prepared.insert(key, prep);
                }
                let (dtype, bytes, perm) = gptq_tensor(t, &values, &prepared[&key], opts, pool)?;
                if let Some(p) = perm {
                    perms.push((t.name.clone(), p));
                }
                Ok((dtype, bytes))
            }
            (QuantMethod::Int8, Some(key), _)
                if to == DType::INT8 && outlier_sets.contains_key(&key) =>
            {
                let channels = outlier_sets[&key].clone();
                let w = split_off(&mut values, t.row_len(), &channels);
                let bytes = encode_threads(DType::F16, &w, channels.len(), threads);
                splits.push(SplitTensor {
                    name: t.name.clone(),
                    rows: t.shape()[0],
                    channels,
                    bytes,
                });
                Ok((to, encode_threads(to, &values, t.row_len(), threads)))
            }
            _ => Ok((to, encode_threads(to, &values, t.row_len(), threads))),
        }
    };
    let mut writer = retype_with(
        source,
        &mut encode,
        method.file_type(),
        &mut *progress.tensor,
    )?;
    writer.add_metadata(METHOD_KEY, MetaValue::String(describe(method, opts)))?;
    for (name, perm) in perms {
        writer.add_metadata(
            &format!("{INPUT_PERM_KEY_PREFIX}{name}"),
            MetaValue::Array(MetaArray::U32(perm)),
        )?;
    }
    for t in splits {
        let name = outlier_weight_name(&t.name);
        let shape = [t.rows, t.channels.len()];
        writer.add_tensor(&name, DType::F16, &shape, t.bytes)?;
        let plan = TensorPlan {
            name,
            shape: shape.to_vec(),
            from: DType::F32,
            to: DType::F16,
            seconds: 0.0,
        };
        (progress.tensor)(&plan);
        writer.add_metadata(
            &format!("{OUTLIER_COLS_KEY_PREFIX}{}", t.name),
            MetaValue::Array(MetaArray::U32(t.channels)),
        )?;
    }
    Ok(writer)
}

/// The outlier channels of a matrix and their F16 weights (`[rows, channels]`).
struct SplitTensor {
    name: String,
    rows: usize,
    channels: Vec<u32>,
    bytes: Vec<u8>,
}

/// The α values to try, or `None` without smoothing.
fn smoothing_alphas(s: Smoothing) -> Option<Vec<f32>> {
    match s {
        Smoothing::Off => None,
        Smoothing::Alpha(a) => Some(vec![a]),
        Smoothing::Search => Some((3..=8).map(|i| i as f32 / 10.0).collect()),
    }
}

/// Up to `count` outlier channels per site, by calibration maxima (of the smoothed inputs,
/// `|x| / s`, where `scales` has the site's smoothing scales).
fn choose_outliers(
    calib: &Calibration,
    scales: &HashMap<(usize, LinearSite), Vec<f32>>,
    count: usize,
) -> HashMap<(usize, LinearSite), Vec<u32>> {
    calib
        .sites
        .iter()
        .map(|(key, st)| {
            let amax: Vec<f32> = match scales.get(key) {
                Some(s) => st.abs_max.iter().zip(s).map(|(a, s)| a / s).collect(),
                None => st.abs_max.clone(),
            };
            (*key, choose_channels(&amax, count))
        })
        .filter(|(_, c)| !c.is_empty())
        .collect()
}

/// `awq g128`, `gptq 4-bit g128 act-order damp 0.01`, ...
fn describe(method: QuantMethod, o: &QuantOptions) -> String {
    match method {
        QuantMethod::Int4 | QuantMethod::Awq => format!("{} g{}", method.name(), o.group),
        QuantMethod::Gptq if o.bits == 8 => format!("gptq 8-bit per-channel damp {}", o.damp),
        QuantMethod::Gptq => {
            format!(
                "gptq 4-bit g{}{} damp {}",
                o.group,
                if o.act_order { " act-order" } else { "" },
                o.damp
            )
        }
        QuantMethod::Nf4 if o.double_quant => "nf4 double-quant".into(),
        QuantMethod::Int8 => format!("int8 per-channel, per-token activations{}", int8_extras(o)),
        m => m.name().into(),
    }
}

/// What calibration added to INT8 (the options only take effect with calibration text).
fn int8_extras(o: &QuantOptions) -> String {
    let smooth = match o.smoothing {
        Smoothing::Off => String::new(),
        Smoothing::Alpha(a) => format!(", SmoothQuant alpha {a}"),
        Smoothing::Search => ", SmoothQuant alpha per site".into(),
    };
    let outliers = if o.outliers > 0 {
        format!(", up to {} F16 outlier channels", o.outliers)
    } else {
        String::new()
    };
    smooth + &outliers
}

/// `n` tokens drawn uniformly from `0..vocab` by a fixed generator (the same every run).
fn random_tokens(n: usize, vocab: usize) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % vocab.max(1) as u64) as u32
        })
        .collect()
}

/// What calibration runs on.
enum CalibInput<'a> {
    Text(&'a CalibText),
    /// Pseudo-random token windows ([`RANDOM_WINDOWS`] of [`RANDOM_CTX`]): enough to find the
    /// channels that carry outsized activations, which sit in the same few channels whatever
    /// the input (measured on SmolLM2 in docs/quantization.md).
    Random,
}

/// Windows and window length of [`CalibInput::Random`].
const RANDOM_WINDOWS: usize = 8;
const RANDOM_CTX: usize = 512;

fn run_calibration(
    path: &Path,
    input: CalibInput<'_>,
    hessian: bool,
    pool: &ThreadPool,
) -> Result<Calibration, QuantizeError> {
    let loaded =
        kestrel_model::load_model(path).map_err(|e| QuantizeError::Calibration(e.to_string()))?;
    let (tokens, budget, ctx) = match input {
        CalibInput::Text(c) => {
            let tokens = loaded
                .tokenizer
                .encode(&c.text, false)
                .map_err(|e| QuantizeError::Calibration(e.to_string()))?;
            (tokens, c.tokens, c.ctx)
        }
        CalibInput::Random => {
            let n = RANDOM_WINDOWS * RANDOM_CTX;
            (random_tokens(n, loaded.model.dims().vocab), n, RANDOM_CTX)
        }
    };
    if tokens.len() < ctx {
        return Err(QuantizeError::Calibration(format!(
            "calibration text has {} tokens, fewer than one window of {ctx}",
            tokens.len()
        )));
    }
    let cfg = CalibConfig {
        tokens: budget,
        ctx,
        sample_rows: 128,
        hessian,
    };
    Ok(calibrate(&loaded.model, &tokens, cfg, pool))
}

/// Whether GGUF tensor `name` is a V projection.
fn is_value_projection(name: &str) -> bool {
    name.ends_with(".attn_v.weight")
}

/// The GPTQ preparation of the Hessian of `t`'s input site: for the V projection the
/// attention-weighted one ([`SiteStats::value_hessian`]).
fn prepare_site(
    t: &SourceTensor,
    stats: Option<&SiteStats>,
    value: bool,
    opts: &QuantOptions,
) -> Result<Prepared, QuantizeError> {
    let cols = t.row_len();
    let h = stats
        .and_then(|s| {
            if value {
                s.value_hessian.as_deref()
            } else {
                s.hessian.as_deref()
            }
        })
        .filter(|h| h.len() == cols * cols)
        .ok_or_else(|| {
            QuantizeError::Calibration(format!("no calibration statistics reached {}", t.name))
        })?;
    prepare(h, cols, opts.act_order, opts.damp).map_err(|source| QuantizeError::Gptq {
        tensor: t.name.clone(),
        source,
    })
}

/// GPTQ one layer linear, with its site's prepared Hessian.
fn gptq_tensor(
    t: &SourceTensor,
    values: &[f32],
    prep: &Prepared,
    opts: &QuantOptions,
    pool: &ThreadPool,
) -> Result<PackedLinear, QuantizeError> {
    let (rows, cols) = (t.shape()[0], t.row_len());
    let (group, kind) = match opts.bits {
        8 => (cols, GridKind::Symmetric8),
        _ => (
            QuantMethod::Gptq.dtype(opts, cols).block_size(),
            GridKind::Asymmetric(4),
        ),
    };
    let cfg = GptqConfig {
        group,
        kind,
        act_order: opts.act_order,
        damp: opts.damp,
    };
    let q = gptq_prepared(pool, values, rows, prep, cfg);
    let (dtype, bytes) = pack(&q)?;
    Ok((dtype, bytes, q.perm))
}

/// Chooses per-input-channel scales for the matrices reading one site.
type ChooseScales<'a> = dyn Fn(&SiteStats, &[Weight<'_>], usize) -> Vec<f32> + 'a;

/// Scale the inputs of every layer's linear groups by `choose`'s scales: the matrices' columns
/// are multiplied by `s` and the producer of their input (a norm weight, or the rows of the up
/// projection) divided by it, so the unquantized model computes the same function. Returns the
/// transformed `f32` values of every changed tensor and the scales of every site.
///
/// With `tie_gqa`, the attention output projection is scaled too under grouped-query
/// attention: query heads that share a V head share their scales (geometric mean), and the
/// inverse goes into that V head's rows.
fn fold_scales(
    source: &ModelSource,
    calib: &Calibration,
    choose: &ChooseScales<'_>,
    tie_gqa: bool,
) -> Result<Folded, QuantizeError> {
    let mut out: HashMap<String, Vec<f32>> = HashMap::new();
    let mut applied = HashMap::new();
    let cfg = &source.config;
    let heads_per_kv = cfg.n_heads / cfg.n_kv_heads.max(1);
    for layer in 0..source.config.n_layers {
        let name = |role: &str| format!("blk.{layer}.{role}.weight");
        let mut groups: Vec<(LinearSite, Vec<&str>, &str)> = vec![
            (
                LinearSite::Qkv,
                vec!["attn_q", "attn_k", "attn_v"],
                "attn_norm",
            ),
            (LinearSite::GateUp, vec!["ffn_gate", "ffn_up"], "ffn_norm"),
            (LinearSite::Down, vec!["ffn_down"], "ffn_up"),
        ];
        if tie_gqa || heads_per_kv == 1 {
            groups.push((LinearSite::O, vec!["attn_output"], "attn_v"));
        }
        for (site, targets, producer) in groups {
            let stats = calib.site(layer, site).ok_or_else(|| {
                QuantizeError::Calibration(format!(
                    "no calibration statistics for layer {layer} {site:?}"
                ))
            })?;
            let mut ws: Vec<Vec<f32>> = targets
                .iter()
                .map(|r| take(&mut out, source, &name(r)))
                .collect::<Result<_, _>>()?;
            let cols = stats.cols;
            let weights: Vec<Weight<'_>> = ws
                .iter()
                .map(|w| Weight {
                    values: w,
                    rows: w.len() / cols,
                })
                .collect();
            let mut s = choose(stats, &weights, cols);
            let mut prod = take(&mut out, source, &name(producer))?;
            if site == LinearSite::O && heads_per_kv > 1 {
                let (kv_scales, tied) = tie_to_kv_heads(&s, cfg.head_dim, heads_per_kv);
                unscale_rows(&mut prod, &kv_scales);
                s = tied;
            } else {
                unscale_rows(&mut prod, &s);
            }
            out.insert(name(producer), prod);
            for (role, w) in targets.iter().zip(ws.iter_mut()) {
                scale_columns(w, &s);
                out.insert(name(role), std::mem::take(w));
            }
            applied.insert((layer, site), s);
        }
    }
    Ok((out, applied))
}

/// Transformed tensors by name, and the input scales applied at each site.
type Folded = (
    HashMap<String, Vec<f32>>,
    HashMap<(usize, LinearSite), Vec<f32>>,
);

/// Per-KV-head scales (`[kv_heads * head_dim]`, geometric mean over the query heads sharing
/// each KV head) and those scales expanded back to every query head's channels.
fn tie_to_kv_heads(s: &[f32], head_dim: usize, heads_per_kv: usize) -> (Vec<f32>, Vec<f32>) {
    let n_kv = s.len() / (head_dim * heads_per_kv);
    let mut kv = vec![0f32; n_kv * head_dim];
    for (g, chunk) in kv.chunks_exact_mut(head_dim).enumerate() {
        for (d, v) in chunk.iter_mut().enumerate() {
            let log_sum: f32 = (0..heads_per_kv)
                .map(|h| s[((g * heads_per_kv + h) * head_dim) + d].ln())
                .sum();
            *v = (log_sum / heads_per_kv as f32).exp();
        }
    }
    let tied = (0..s.len())
        .map(|i| kv[(i / (head_dim * heads_per_kv)) * head_dim + i % head_dim])
        .collect();
    (kv, tied)
}

/// The current values of tensor `name`: already transformed ones from `out`, else the source's.
fn take(
    out: &mut HashMap<String, Vec<f32>>,
    source: &ModelSource,
    name: &str,
) -> Result<Vec<f32>, QuantizeError> {
    if let Some(v) = out.remove(name) {
        return Ok(v);
    }
    let t = source
        .tensors
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| QuantizeError::Calibration(format!("tensor {name} is missing")))?;
    Ok(t.to_f32()?)
}

#[cfg(test)]
mod tests {
    use super::tie_to_kv_heads;

    #[test]
    fn gqa_scales_are_shared_by_the_heads_of_a_kv_head() {
        // 4 query heads of dim 2 sharing 2 KV heads.
        let s = [1.0, 4.0, 4.0, 1.0, 2.0, 2.0, 8.0, 2.0];
        let (kv, tied) = tie_to_kv_heads(&s, 2, 2);
        let close = |a: f32, b: f32| (a - b).abs() < 1e-5;
        assert!(
            close(kv[0], 2.0) && close(kv[1], 2.0) && close(kv[2], 4.0) && close(kv[3], 2.0),
            "{kv:?}"
        );
        assert!(
            tied.iter()
                .zip([2.0, 2.0, 2.0, 2.0, 4.0, 2.0, 4.0, 2.0])
                .all(|(a, b)| close(*a, b)),
            "{tied:?}"
        );
    }
}
