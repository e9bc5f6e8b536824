//! [`Rtn`]: the methods that round each tensor on its own, without calibration: the GGUF
//! block types (`q8_0`, `q4_0`, `q4_1`, `q4_k`, `q6_k`), group-wise INT4 and NF4.

use super::{CalibRun, QuantizeMethod};
use crate::quantize::toolkit::CalibText;
use crate::quantize::{QuantMethod, QuantOptions, QuantizeError};

/// Round to nearest, tensor by tensor.
pub(in crate::quantize) struct Rtn {
    method: QuantMethod,
    opts: QuantOptions,
}

impl Rtn {
    pub fn new(method: QuantMethod, opts: &QuantOptions) -> Rtn {
        Rtn {
            method,
            opts: opts.clone(),
        }
    }
}

impl QuantizeMethod for Rtn {
    /// None: calibration text given to these methods is not used.
    fn calibration<'a>(
        &mut self,
        _text: Option<&'a CalibText>,
    ) -> Result<Option<CalibRun<'a>>, QuantizeError> {
        Ok(None)
    }

    fn describe(&self) -> String {
        match self.method {
            QuantMethod::Int4 => format!("{} g{}", self.method.name(), self.opts.group),
            QuantMethod::Nf4 if self.opts.double_quant => "nf4 double-quant".into(),
            m => m.name().into(),
        }
    }
}
