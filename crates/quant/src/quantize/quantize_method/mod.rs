//! [`QuantizeMethod`]: what one quantization method adds to the shared
//! [`quantize_with`](super::quantize_with) pipeline, one implementation per method:
//!
//! * [`Rtn`]: the GGUF block types, INT4 and NF4, each tensor rounded on its own;
//! * [`Awq`]: activation-aware input scales folded into the model, then group-wise INT4;
//! * [`Gptq`]: Hessian-guided rounding of every layer linear;
//! * [`Int8`]: per-channel INT8 with optional SmoothQuant and F16 outlier channels.
//!
//! ```text
//! calibration() ─► run_calibration ─► prepare() (tensor overrides) ─► encode() per tensor
//!               ─► describe() (the file's method string) ─► finish() (extra metadata, tensors)
//! ```
//!
//! [`quantizer`] is the one place a [`QuantMethod`] picks its implementation.

mod awq;
mod gptq;
mod int8;
mod rtn;

use std::collections::HashMap;

use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;
use kestrel_model::weights::gguf::GgufWriter;

use super::calib::Calibration;
use super::toolkit::CalibText;
use super::{QuantMethod, QuantOptions, QuantizeError};
use crate::codec::encode_threads;
use crate::convert::{ModelSource, SourceTensor};
use crate::plan::TensorPlan;

pub(super) use awq::Awq;
pub(super) use gptq::Gptq;
pub(super) use int8::Int8;
pub(super) use rtn::Rtn;

/// What calibration runs on.
pub(super) enum CalibInput<'a> {
    Text(&'a CalibText),
    /// Pseudo-random token windows: enough to find the channels that carry outsized
    /// activations, which sit in the same few channels whatever the input (measured on
    /// SmolLM2 in docs/quantization.md).
    Random,
}

/// The calibration run a method asks for.
pub(super) struct CalibRun<'a> {
    pub input: CalibInput<'a>,
    /// Accumulate each site's Hessian (GPTQ).
    pub hessian: bool,
    /// The stage reported while it runs.
    pub stage: &'static str,
}

/// What every step of the pipeline may use.
pub(super) struct Env<'a> {
    pub source: &'a ModelSource,
    pub pool: &'a ThreadPool,
    /// Threads for the row encoders.
    pub threads: usize,
}

/// Transformed `f32` values of tensors, by name, quantized instead of the source's.
pub(super) type Overrides = HashMap<String, Vec<f32>>;

/// One quantization method's steps in [`quantize_with`](super::quantize_with).
pub(super) trait QuantizeMethod {
    /// The calibration this method needs given the caller's text (`None`: none), or why it
    /// cannot run without it.
    fn calibration<'a>(
        &mut self,
        text: Option<&'a CalibText>,
    ) -> Result<Option<CalibRun<'a>>, QuantizeError>;

    /// Transforms the model before quantizing, from the calibration statistics (run only
    /// when [`QuantizeMethod::calibration`] asked for a run).
    fn prepare(
        &mut self,
        _env: &Env<'_>,
        _stats: &Calibration,
        _stage: &mut dyn FnMut(&str),
    ) -> Result<Overrides, QuantizeError> {
        Ok(Overrides::new())
    }

    /// Encodes one tensor's `values` as `to` (or as the type the method's packing picks).
    fn encode(
        &mut self,
        env: &Env<'_>,
        t: &SourceTensor,
        values: Vec<f32>,
        to: DType,
        _stats: Option<&Calibration>,
    ) -> Result<(DType, Vec<u8>), QuantizeError> {
        Ok(round_to_nearest(env, t, &values, to))
    }

    /// The method and settings as the file records them (`awq g128`, ...).
    fn describe(&self) -> String;

    /// Adds what the method keeps beside the tensors (metadata, extra tensors), reporting
    /// each extra tensor to `on_tensor`.
    fn finish(
        &mut self,
        _writer: &mut GgufWriter,
        _on_tensor: &mut dyn FnMut(&TensorPlan),
    ) -> Result<(), QuantizeError> {
        Ok(())
    }
}

/// The implementation of `method` with `opts`.
pub(super) fn quantizer(method: QuantMethod, opts: &QuantOptions) -> Box<dyn QuantizeMethod> {
    match method {
        QuantMethod::Awq => Box::new(Awq::new(opts)),
        QuantMethod::Gptq => Box::new(Gptq::new(opts)),
        QuantMethod::Int8 => Box::new(Int8::new(opts)),
        QuantMethod::Q8_0
        | QuantMethod::Q4_0
        | QuantMethod::Q4_1
        | QuantMethod::Q4_K
        | QuantMethod::Q6_K
        | QuantMethod::Int4
        | QuantMethod::Nf4 => Box::new(Rtn::new(method, opts)),
    }
}

/// `values` of `t` encoded as `to`, each row on its own.
fn round_to_nearest(
    env: &Env<'_>,
    t: &SourceTensor,
    values: &[f32],
    to: DType,
) -> (DType, Vec<u8>) {
    (to, encode_threads(to, values, t.row_len(), env.threads))
}

/// The calibration of the methods that cannot run without text (AWQ, GPTQ).
fn required_text<'a>(
    method: QuantMethod,
    text: Option<&'a CalibText>,
    hessian: bool,
) -> Result<Option<CalibRun<'a>>, QuantizeError> {
    let text = text.ok_or(QuantizeError::NeedsCalibration {
        method: method.name(),
    })?;
    Ok(Some(CalibRun {
        input: CalibInput::Text(text),
        hessian,
        stage: "calibrating",
    }))
}
