//! [`QuantizingSource`]: quantize a floating-point model while it loads (`kestrel serve
//! --quantize int8|int4|nf4|q4_k|…`). Wraps any [`TensorSource`]: every matrix the type rule
//! of [`QuantMethod`] assigns a quantized type is converted when the model asks for it, with
//! no calibration; 1-D tensors pass through.

use std::sync::Mutex;

use kestrel_kernels::{DType, SharedBytes};
use kestrel_model::arch::TensorNaming;
use kestrel_model::weights::{TensorSource, TensorView};

use super::{QuantMethod, QuantOptions, QuantizeError};
use crate::codec::encode_threads;

/// Called after each converted tensor with `(name, from, to)`.
pub type OnTensor<'a> = &'a (dyn Fn(&str, DType, DType) + Sync);

/// A tensor source that quantizes floating-point matrices on the way out.
pub struct QuantizingSource<'a> {
    inner: &'a dyn TensorSource,
    naming: TensorNaming,
    method: QuantMethod,
    opts: QuantOptions,
    on_tensor: Option<OnTensor<'a>>,
    failures: Mutex<Vec<(String, String)>>,
}

impl<'a> QuantizingSource<'a> {
    /// Methods that need calibration (AWQ, GPTQ) are refused: use `kestrel quantize`.
    pub fn new(
        inner: &'a dyn TensorSource,
        naming: TensorNaming,
        method: QuantMethod,
        opts: QuantOptions,
        on_tensor: Option<OnTensor<'a>>,
    ) -> Result<QuantizingSource<'a>, QuantizeError> {
        if method.needs_calibration() {
            return Err(QuantizeError::NeedsCalibration {
                method: method.name(),
            });
        }
        opts.validate(method)?;
        Ok(QuantizingSource {
            inner,
            naming,
            method,
            opts,
            on_tensor,
            failures: Mutex::default(),
        })
    }

    /// Tensors that could not be converted, with the reason.
    pub fn failures(&self) -> Vec<(String, String)> {
        self.failures.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// The name the type rule knows (GGUF spelling for the embedding and the head).
    fn rule_name<'n>(&self, name: &'n str) -> &'n str {
        if name == self.naming.embedding() {
            "token_embd.weight"
        } else if name == self.naming.output() {
            "output.weight"
        } else {
            name
        }
    }

    fn convert(&self, view: TensorView) -> Result<TensorView, String> {
        let to = self
            .method
            .tensor_type_with(self.rule_name(&view.name), &view.shape, &self.opts);
        if to == view.dtype || to == DType::F32 {
            return Ok(view);
        }
        if view.dtype.is_quantized() {
            return Err(format!(
                "is already {}; --quantize needs an F32, F16 or BF16 model",
                view.dtype
            ));
        }
        let values = kestrel_model::layers::to_f32_vec(&view).map_err(|e| e.to_string())?;
        let cols = view.shape.last().copied().unwrap_or(1);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let bytes = encode_threads(to, &values, cols, threads);
        if let Some(f) = self.on_tensor {
            f(&view.name, view.dtype, to);
        }
        Ok(TensorView {
            dtype: to,
            data: SharedBytes::from_vec(bytes),
            ..view
        })
    }
}

impl TensorSource for QuantizingSource<'_> {
    fn tensor(&self, name: &str) -> Option<TensorView> {
        let view = self.inner.tensor(name)?;
        match self.convert(view) {
            Ok(v) => Some(v),
            Err(reason) => {
                if let Ok(mut f) = self.failures.lock() {
                    f.push((name.to_string(), reason));
                }
                None
            }
        }
    }

    fn tensor_names(&self) -> Vec<String> {
        self.inner.tensor_names()
    }

    fn input_perm(&self, name: &str) -> Option<Vec<u32>> {
        self.inner.input_perm(name)
    }
}
