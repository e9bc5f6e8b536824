//! [`QuantConfig`]: the `quantization_config` of an AWQ or GPTQ checkpoint, read from
//! `config.json`, or from the `quantize_config.json` (AutoGPTQ/GPTQModel) or `quant_config.json`
//! (older AutoAWQ) beside it. Settings Kestrel cannot read are rejected here, with a typed error,
//! before any tensor is touched.

use std::path::Path;

use serde_json::{Map, Value};

use super::ImportError;

/// Which tool's packing the checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportMethod {
    /// AutoAWQ, GEMM layout.
    Awq,
    /// AutoGPTQ / GPTQModel, `gptq` (v1) or `gptq_v2` layout.
    Gptq,
}

impl ImportMethod {
    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            ImportMethod::Awq => "AWQ",
            ImportMethod::Gptq => "GPTQ",
        }
    }
}

/// A validated quantization config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantConfig {
    pub method: ImportMethod,
    /// Bits per code: 4 (AWQ, GPTQ) or 8 (GPTQ).
    pub bits: u8,
    /// Input columns per group; `None` when the file says `-1` (one group per row).
    pub group_size: Option<usize>,
    /// GPTQ activation order: columns were quantized in a permuted order given by `g_idx`.
    pub desc_act: bool,
    /// Symmetric quantization (informational: zeros are read from the file either way).
    pub sym: bool,
    /// GPTQ v1 layout (`checkpoint_format` "gptq"): the stored zero is `zero - 1`.
    pub zero_point_v1: bool,
    /// Modules the tool left unquantized (AWQ `modules_to_not_convert`), as listed.
    pub modules_to_not_convert: Vec<String>,
}

impl QuantConfig {
    /// Columns per group for a matrix with `cols` input columns.
    pub fn group_size_for(&self, cols: usize) -> usize {
        self.group_size.unwrap_or(cols)
    }
}

/// The quantization config of the HF model directory `dir`, or `None` if it is not quantized.
///
/// Looks at `config.json`'s `quantization_config` first, then `quantize_config.json`, then
/// `quant_config.json`.
pub fn quant_config(dir: &Path) -> Result<Option<QuantConfig>, ImportError> {
    let config = dir.join("config.json");
    if config.is_file() {
        let json = read_json(&config)?;
        if let Some(q) = json.get("quantization_config") {
            let obj = q.as_object().ok_or_else(|| ImportError::BadField {
                path: config.clone(),
                field: "quantization_config",
                reason: "is not an object".to_string(),
            })?;
            return parse(obj, &config).map(Some);
        }
    }
    for name in ["quantize_config.json", "quant_config.json"] {
        let path = dir.join(name);
        if path.is_file() {
            let json = read_json(&path)?;
            let obj = json.as_object().ok_or_else(|| ImportError::Json {
                path: path.clone(),
                reason: "top level is not an object".to_string(),
            })?;
            return parse(obj, &path).map(Some);
        }
    }
    Ok(None)
}

fn read_json(path: &Path) -> Result<Value, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ImportError::Json {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Typed access to one config object, with the file it came from for messages.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    path: &'a Path,
}

impl Fields<'_> {
    /// The first of `keys` present (and not null).
    fn get(&self, keys: &[&'static str]) -> Option<(&'static str, &Value)> {
        keys.iter()
            .find_map(|&k| self.obj.get(k).filter(|v| !v.is_null()).map(|v| (k, v)))
    }

    fn bad(&self, field: &'static str, reason: &str) -> ImportError {
        ImportError::BadField {
            path: self.path.to_path_buf(),
            field,
            reason: reason.to_string(),
        }
    }

    fn int(&self, keys: &[&'static str]) -> Result<Option<i64>, ImportError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.bad(k, "is not an integer")),
        }
    }

    fn required_int(&self, keys: &[&'static str]) -> Result<i64, ImportError> {
        self.int(keys)?.ok_or_else(|| ImportError::MissingField {
            path: self.path.to_path_buf(),
            field: keys[0],
        })
    }

    fn bool_or(&self, key: &'static str, default: bool) -> Result<bool, ImportError> {
        match self.get(&[key]) {
            None => Ok(default),
            Some((k, v)) => v.as_bool().ok_or_else(|| self.bad(k, "is not a boolean")),
        }
    }

    fn string(&self, keys: &[&'static str]) -> Result<Option<String>, ImportError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_str()
                .map(|s| Some(s.to_ascii_lowercase()))
                .ok_or_else(|| self.bad(k, "is not a string")),
        }
    }

    fn strings(&self, key: &'static str) -> Result<Vec<String>, ImportError> {
        let Some((k, v)) = self.get(&[key]) else {
            return Ok(Vec::new());
        };
        let list = v.as_array().ok_or_else(|| self.bad(k, "is not a list"))?;
        list.iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| self.bad(k, "holds a non-string"))
            })
            .collect()
    }
}

/// Validate one config object (`path` is only for messages).
fn parse(obj: &Map<String, Value>, path: &Path) -> Result<QuantConfig, ImportError> {
    let f = Fields { obj, path };
    let method = match f.string(&["quant_method"])?.as_deref() {
        Some("awq") => ImportMethod::Awq,
        Some("gptq") => ImportMethod::Gptq,
        Some(other) => return Err(ImportError::UnsupportedMethod(other.to_string())),
        // Older files carry no method: AutoAWQ's use its own key names, AutoGPTQ's do not.
        None if f
            .get(&["w_bit", "q_group_size", "zero_point", "version"])
            .is_some() =>
        {
            ImportMethod::Awq
        }
        None => ImportMethod::Gptq,
    };
    let bits = f.required_int(&["bits", "w_bit"])?;
    let group_size = group_size(&f)?;
    match method {
        ImportMethod::Awq => awq(&f, bits, group_size),
        ImportMethod::Gptq => gptq(&f, bits, group_size),
    }
}

fn group_size(f: &Fields) -> Result<Option<usize>, ImportError> {
    match f.required_int(&["group_size", "q_group_size"])? {
        -1 => Ok(None),
        g if g > 0 => Ok(Some(g as usize)),
        _ => Err(f.bad("group_size", "must be positive or -1")),
    }
}

fn awq(f: &Fields, bits: i64, group_size: Option<usize>) -> Result<QuantConfig, ImportError> {
    if bits != 4 {
        return Err(ImportError::UnsupportedBits {
            method: "AWQ",
            bits,
            supported: "4",
        });
    }
    if !f.bool_or("zero_point", true)? {
        return Err(f.bad(
            "zero_point",
            "is false; Kestrel imports AWQ with zero points only",
        ));
    }
    let version = f
        .string(&["version"])?
        .unwrap_or_else(|| "gemm".to_string());
    if version != "gemm" {
        return Err(ImportError::UnsupportedFormat {
            method: "AWQ",
            format: version,
            supported: "\"gemm\"",
        });
    }
    Ok(QuantConfig {
        method: ImportMethod::Awq,
        bits: 4,
        group_size,
        desc_act: false,
        sym: false,
        zero_point_v1: false,
        modules_to_not_convert: f.strings("modules_to_not_convert")?,
    })
}

fn gptq(f: &Fields, bits: i64, group_size: Option<usize>) -> Result<QuantConfig, ImportError> {
    if bits != 4 && bits != 8 {
        return Err(ImportError::UnsupportedBits {
            method: "GPTQ",
            bits,
            supported: "4, 8",
        });
    }
    let unsupported = |format: String| ImportError::UnsupportedFormat {
        method: "GPTQ",
        format,
        supported: "\"gptq\", \"gptq_v2\"",
    };
    if f.bool_or("is_marlin_format", false)? {
        return Err(unsupported("marlin".to_string()));
    }
    let format = f.string(&["checkpoint_format", "format"])?;
    let zero_point_v1 = match format.as_deref().unwrap_or("gptq") {
        "gptq" => true,
        "gptq_v2" => false,
        other => return Err(unsupported(other.to_string())),
    };
    if let Some(dtype) = f.string(&["pack_dtype"])? {
        if dtype != "int32" && dtype != "torch.int32" {
            return Err(f.bad(
                "pack_dtype",
                &format!("is {dtype:?}; only int32 is supported"),
            ));
        }
    }
    Ok(QuantConfig {
        method: ImportMethod::Gptq,
        bits: bits as u8,
        group_size,
        desc_act: f.bool_or("desc_act", false)?,
        sym: f.bool_or("sym", true)?,
        zero_point_v1,
        modules_to_not_convert: f.strings("modules_to_not_convert")?,
    })
}
