//! [`QuantMethod`]: what `kestrel quantize` produces, and which type each tensor gets.

use kestrel_kernels::DType;

use super::QuantizeError;

/// A quantization target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum QuantMethod {
    Q8_0,
    Q4_0,
    Q4_1,
    Q4_K,
    Q6_K,
    /// Per-output-channel symmetric INT8 (W8A8 kernels).
    Int8,
    /// Group-wise asymmetric INT4, round to nearest.
    Int4,
    /// Activation-aware scaling, then group-wise INT4 (needs calibration).
    Awq,
    /// GPTQ, group-wise INT4 or per-channel INT8 (needs calibration).
    Gptq,
    /// NormalFloat-4, blocks of 64 (double-quantized scales with `double_quant`).
    Nf4,
}

/// Settings of the calibrated and group-wise methods.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantOptions {
    /// Columns per group for INT4 methods (falls back to 64, then 32, where rows are not a
    /// whole number of groups).
    pub group: usize,
    /// Bits for GPTQ: 4 (group-wise asymmetric) or 8 (per-channel symmetric).
    pub bits: u8,
    /// GPTQ: quantize columns in decreasing-Hessian-diagonal order (`desc_act`).
    pub act_order: bool,
    /// GPTQ dampening, fraction of the mean Hessian diagonal.
    pub damp: f32,
    /// NF4: quantize the block scales too.
    pub double_quant: bool,
    /// AWQ: grid points searched for the scaling exponent.
    pub awq_grid: usize,
    /// INT8 with calibration: SmoothQuant smoothing of the activations.
    pub smoothing: Smoothing,
    /// INT8 with calibration: input channels per linear layer (at most 1/16 of its inputs)
    /// kept in F16 beside the INT8 weights, those with the largest calibration magnitudes.
    pub outliers: usize,
}

impl Default for QuantOptions {
    fn default() -> Self {
        QuantOptions {
            group: 128,
            bits: 4,
            act_order: false,
            damp: 0.1,
            double_quant: false,
            awq_grid: 20,
            smoothing: Smoothing::Off,
            outliers: 32,
        }
    }
}

/// SmoothQuant (Xiao et al., 2022) for INT8 with calibration: per-input-channel scales
/// `max|x|^α / max|w|^(1-α)` move activation range into the weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Smoothing {
    Off,
    /// One migration strength α in (0, 1] for every layer.
    Alpha(f32),
    /// α per layer site among 0.3..0.8 (or none), by the W8A8 output error on calibration rows.
    Search,
}

impl std::str::FromStr for Smoothing {
    type Err = QuantizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" | "none" => Ok(Smoothing::Off),
            "auto" => Ok(Smoothing::Search),
            _ => match s.parse::<f32>() {
                Ok(a) if a > 0.0 && a <= 1.0 => Ok(Smoothing::Alpha(a)),
                _ => Err(QuantizeError::BadOption(format!(
                    "smoothing {s:?} (expected off, auto or an alpha in (0, 1])"
                ))),
            },
        }
    }
}

impl QuantOptions {
    /// Reject settings no method can use.
    pub fn validate(&self, method: QuantMethod) -> Result<(), QuantizeError> {
        if ![32, 64, 128].contains(&self.group) {
            return Err(QuantizeError::BadOption(format!(
                "group size {} (expected 32, 64 or 128)",
                self.group
            )));
        }
        if method == QuantMethod::Gptq && ![4, 8].contains(&self.bits) {
            return Err(QuantizeError::BadOption(format!(
                "GPTQ bits {} (expected 4 or 8)",
                self.bits
            )));
        }
        if !(0.0..1.0).contains(&self.damp) {
            return Err(QuantizeError::BadOption(format!(
                "damp {} (expected 0 <= damp < 1)",
                self.damp
            )));
        }
        if let Smoothing::Alpha(a) = self.smoothing {
            if !(a > 0.0 && a <= 1.0) {
                return Err(QuantizeError::BadOption(format!(
                    "smooth alpha {a} (expected 0 < alpha <= 1)"
                )));
            }
        }
        if self.awq_grid == 0 {
            return Err(QuantizeError::BadOption("AWQ grid of 0 points".into()));
        }
        Ok(())
    }
}

impl std::str::FromStr for QuantMethod {
    type Err = QuantizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "q8_0" => Ok(QuantMethod::Q8_0),
            "q4_0" => Ok(QuantMethod::Q4_0),
            "q4_1" => Ok(QuantMethod::Q4_1),
            "q4_k" | "q4_k_s" => Ok(QuantMethod::Q4_K),
            "q6_k" => Ok(QuantMethod::Q6_K),
            "int8" => Ok(QuantMethod::Int8),
            "int4" => Ok(QuantMethod::Int4),
            "awq" => Ok(QuantMethod::Awq),
            "gptq" => Ok(QuantMethod::Gptq),
            "nf4" => Ok(QuantMethod::Nf4),
            other => Err(match unsupported_target(other) {
                Some((name, reason)) => QuantizeError::UnsupportedTarget { name, reason },
                None => QuantizeError::UnknownMethod(s.to_string()),
            }),
        }
    }
}

/// Why an importance-matrix type cannot be made here.
const NEEDS_IMATRIX: &str = "it needs an importance matrix (as llama.cpp requires for IQ2_XXS, \
     IQ2_XS, IQ2_S, IQ1_S and IQ1_M), which Kestrel does not compute; make it with llama.cpp's \
     llama-quantize --imatrix";
/// Why the other low-bit GGUF types cannot be made here.
const NO_QUANTIZER: &str = "Kestrel has no quantizer for it (it needs no importance matrix); \
     make it with llama.cpp's llama-quantize";

/// The GGUF type and refusal reason of a lower-case target name that Kestrel loads but
/// does not produce (the type names and llama.cpp's file-type names built on them).
fn unsupported_target(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "iq2_xxs" => ("IQ2_XXS", NEEDS_IMATRIX),
        "iq2_xs" => ("IQ2_XS", NEEDS_IMATRIX),
        "iq2_s" | "iq2_m" => ("IQ2_S", NEEDS_IMATRIX),
        "iq1_s" => ("IQ1_S", NEEDS_IMATRIX),
        "iq1_m" => ("IQ1_M", NEEDS_IMATRIX),
        "iq3_xxs" => ("IQ3_XXS", NO_QUANTIZER),
        "iq3_s" | "iq3_xs" | "iq3_m" => ("IQ3_S", NO_QUANTIZER),
        "mxfp4" | "mxfp4_moe" => ("MXFP4", NO_QUANTIZER),
        _ => return None,
    })
}

impl QuantMethod {
    /// The block type of ordinary weight matrices with `group`-wide rows allowed by `cols`.
    pub fn dtype(self, opts: &QuantOptions, cols: usize) -> DType {
        use kestrel_kernels::quant::int4;
        match self {
            QuantMethod::Q8_0 => DType::Q8_0,
            QuantMethod::Q4_0 => DType::Q4_0,
            QuantMethod::Q4_1 => DType::Q4_1,
            QuantMethod::Q4_K => DType::Q4_K,
            QuantMethod::Q6_K => DType::Q6_K,
            QuantMethod::Int8 => DType::INT8,
            QuantMethod::Gptq if opts.bits == 8 => DType::INT8,
            QuantMethod::Int4 | QuantMethod::Awq | QuantMethod::Gptq => [opts.group, 64, 32]
                .into_iter()
                .filter(|g| *g <= opts.group && cols.is_multiple_of(*g))
                .find_map(int4::dtype_for_group)
                .unwrap_or(DType::Q8_0),
            QuantMethod::Nf4 if opts.double_quant => DType::NF4_DQ,
            QuantMethod::Nf4 => DType::NF4,
        }
    }

    /// Whether the method needs calibration statistics.
    pub fn needs_calibration(self) -> bool {
        matches!(self, QuantMethod::Awq | QuantMethod::Gptq)
    }

    /// The lower-case name `--method` takes.
    pub fn name(self) -> &'static str {
        match self {
            QuantMethod::Q8_0 => "q8_0",
            QuantMethod::Q4_0 => "q4_0",
            QuantMethod::Q4_1 => "q4_1",
            QuantMethod::Q4_K => "q4_k",
            QuantMethod::Q6_K => "q6_k",
            QuantMethod::Int8 => "int8",
            QuantMethod::Int4 => "int4",
            QuantMethod::Awq => "awq",
            QuantMethod::Gptq => "gptq",
            QuantMethod::Nf4 => "nf4",
        }
    }

    /// llama.cpp's `general.file_type` (`LLAMA_FTYPE_MOSTLY_*`) for this method.
    pub fn file_type(self) -> u32 {
        match self {
            QuantMethod::Q4_0 => 2,
            QuantMethod::Q4_1 => 3,
            QuantMethod::Q8_0 => 7,
            QuantMethod::Q4_K => 14,
            QuantMethod::Q6_K => 18,
            // Kestrel's own types: the main matrix type's id (not a llama.cpp file type).
            m => m.dtype(&QuantOptions::default(), 128) as u32,
        }
    }

    /// The type tensor `name` of row-major `shape` gets (default options).
    pub fn tensor_type(self, name: &str, shape: &[usize]) -> DType {
        self.tensor_type_with(name, shape, &QuantOptions::default())
    }

    /// The type tensor `name` of row-major `shape` gets. The token embedding and output head
    /// get Q8_0 for `q8_0` and Kestrel's own methods (which only quantize the layers' linear
    /// weights, as AWQ and GPTQ do) and Q6_K for the other GGUF methods.
    pub fn tensor_type_with(self, name: &str, shape: &[usize], opts: &QuantOptions) -> DType {
        if shape.len() < 2 {
            return DType::F32;
        }
        let cols = shape[shape.len() - 1];
        let is_head = name == "token_embd.weight" || name == "output.weight";
        let wanted = match (is_head, self) {
            (
                true,
                QuantMethod::Q4_0 | QuantMethod::Q4_1 | QuantMethod::Q4_K | QuantMethod::Q6_K,
            ) => DType::Q6_K,
            (true, _) => DType::Q8_0,
            (false, m) => m.dtype(opts, cols),
        };
        fitting_type(wanted, cols)
    }
}

/// `wanted`, or the first fallback whose block size divides `row_len`.
pub fn fitting_type(wanted: DType, row_len: usize) -> DType {
    let mut t = wanted;
    loop {
        if row_len.is_multiple_of(t.block_size()) {
            return t;
        }
        t = match t {
            DType::Q4_K => DType::Q5_0,
            DType::Q5_K | DType::Q6_K | DType::NF4 | DType::NF4_DQ | DType::INT8 => DType::Q8_0,
            _ => DType::F16,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_rules() {
        let m = QuantMethod::Q4_K;
        assert_eq!(m.tensor_type("blk.0.attn_norm.weight", &[576]), DType::F32);
        assert_eq!(
            m.tensor_type("blk.0.ffn_down.weight", &[576, 1536]),
            DType::Q4_K
        );
        assert_eq!(
            m.tensor_type("blk.0.ffn_up.weight", &[1536, 576]),
            DType::Q5_0
        );
        assert_eq!(
            m.tensor_type("token_embd.weight", &[49152, 576]),
            DType::Q8_0
        );
        assert_eq!(
            m.tensor_type("token_embd.weight", &[49152, 512]),
            DType::Q6_K
        );
        assert_eq!(
            QuantMethod::Q8_0.tensor_type("output.weight", &[10, 64]),
            DType::Q8_0
        );
        assert_eq!(
            QuantMethod::Q4_0.tensor_type("blk.0.attn_q.weight", &[64, 64]),
            DType::Q4_0
        );
        assert_eq!(
            QuantMethod::Q4_0.tensor_type("blk.0.attn_q.weight", &[64, 48]),
            DType::F16
        );
        assert_eq!("Q4_K".parse::<QuantMethod>().unwrap(), QuantMethod::Q4_K);
        assert!("q3_k".parse::<QuantMethod>().is_err());
    }

    #[test]
    fn low_bit_gguf_types_are_refused_with_the_reason() {
        for (target, name, imatrix) in [
            ("IQ2_XXS", "IQ2_XXS", true),
            ("iq2_xs", "IQ2_XS", true),
            ("IQ2_S", "IQ2_S", true),
            ("iq1_s", "IQ1_S", true),
            ("IQ1_M", "IQ1_M", true),
            ("iq3_xxs", "IQ3_XXS", false),
            ("IQ3_S", "IQ3_S", false),
            ("mxfp4", "MXFP4", false),
        ] {
            let err = target.parse::<QuantMethod>().unwrap_err();
            let QuantizeError::UnsupportedTarget { name: got, .. } = &err else {
                panic!("{target}: {err:?}");
            };
            assert_eq!(*got, name);
            let msg = err.to_string();
            assert!(msg.contains(name), "{msg}");
            assert_eq!(msg.contains("needs an importance matrix"), imatrix, "{msg}");
            assert!(msg.contains("IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M") == imatrix);
            assert!(msg.contains("produces q8_0, q4_0"), "{msg}");
        }
        assert!(matches!(
            "iq9_q".parse::<QuantMethod>(),
            Err(QuantizeError::UnknownMethod(_))
        ));
    }
}
