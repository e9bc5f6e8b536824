//! [`quantize_with`]: every [`QuantMethod`], including the calibrated ones, to a GGUF writer.
//! The method's [`QuantizeMethod`] (picked once, by [`quantizer`]) says what calibration it
//! needs, how it transforms the model beforehand and how it encodes each tensor; this file
//! runs the steps every method shares:
//!
//! ```text
//! validate ─► calibrate (if asked) ─► prepare ─► per tensor: keep its bytes when the type
//!          is unchanged, else encode ─► method metadata ─► the method's extras
//! ```
//!
//! The methods themselves are described in [`quantize_method`](super::quantize_method).

use std::collections::HashMap;
use std::path::Path;

use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;
use kestrel_model::weights::gguf::{GgufWriter, MetaValue};

use super::calib::{calibrate, CalibConfig, Calibration};
use super::quantize_method::{quantizer, CalibInput, Env};
use super::{QuantMethod, QuantOptions, QuantizeError};
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
    let mut quantizer = quantizer(method, opts);
    let pool = ThreadPool::global();
    let stats = match quantizer.calibration(calib)? {
        None => None,
        Some(run) => {
            (progress.stage)(run.stage);
            Some(run_calibration(path, run.input, run.hessian, pool)?)
        }
    };
    let env = Env {
        source,
        pool,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut overrides = match &stats {
        Some(s) => quantizer.prepare(&env, s, &mut *progress.stage)?,
        None => HashMap::new(),
    };
    (progress.stage)("quantizing");
    let mut encode = |t: &SourceTensor| -> Result<(DType, Vec<u8>), QuantizeError> {
        let to = method.tensor_type_with(&t.name, t.shape(), opts);
        if let Some(raw) = t
            .gguf_bytes()
            .filter(|_| to == t.dtype() && !overrides.contains_key(&t.name))
        {
            return Ok((to, raw.to_vec()));
        }
        let values = match overrides.remove(&t.name) {
            Some(v) => v,
            None => t.to_f32()?,
        };
        quantizer.encode(&env, t, values, to, stats.as_ref())
    };
    let mut writer = retype_with(
        source,
        &mut encode,
        method.file_type(),
        &mut *progress.tensor,
    )?;
    writer.add_metadata(METHOD_KEY, MetaValue::String(quantizer.describe()))?;
    quantizer.finish(&mut writer, &mut *progress.tensor)?;
    Ok(writer)
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
