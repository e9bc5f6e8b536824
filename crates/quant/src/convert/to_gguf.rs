//! HF directory → GGUF: llama metadata from `config.json`, tokenizer metadata from
//! `tokenizer.json` / `tokenizer_config.json`, and tensors re-typed by [`retype`] (which
//! `kestrel quantize` shares).

use std::path::Path;
use std::time::Instant;

use kestrel_kernels::DType;
use kestrel_model::weights::gguf::{GgufWriter, MetaValue};

use super::source::{ModelSource, SourceTensor};
use super::{ConvertError, FloatType, LoraMerge};
use crate::codec::{encode_threads, Encoded};
use crate::plan::TensorPlan;

/// Keys that describe a file's tensor types, rewritten by [`retype`].
const FILE_TYPE: &str = "general.file_type";
const QUANT_VERSION: &str = "general.quantization_version";

/// Convert the HF checkpoint in `input` to a GGUF file at `output` with 2-D tensors stored as
/// `dtype` (1-D tensors F32). Returns the tensors written.
pub fn hf_to_gguf(
    input: &Path,
    output: &Path,
    dtype: FloatType,
) -> Result<Vec<TensorPlan>, ConvertError> {
    hf_to_gguf_merged(input, output, dtype, None)
}

/// [`hf_to_gguf`] with the LoRA adapter at `lora` (if any) merged into the weights.
pub fn hf_to_gguf_merged(
    input: &Path,
    output: &Path,
    dtype: FloatType,
    lora: Option<&Path>,
) -> Result<Vec<TensorPlan>, ConvertError> {
    let mut source = ModelSource::open(input)?;
    if let Some(path) = lora {
        source.merge_lora(&LoraMerge::open(path, &source.config)?)?;
    }
    let rule = |t: &SourceTensor| {
        if t.shape().len() < 2 {
            DType::F32
        } else {
            dtype.dtype()
        }
    };
    let mut plans = Vec::new();
    let writer = retype(&source, &rule, dtype.gguf_file_type(), &mut |p| {
        plans.push(p.clone())
    })?;
    write_file(&writer, output)?;
    Ok(plans)
}

/// Write `writer`'s GGUF file to `path`.
pub fn write_file(writer: &GgufWriter, path: &Path) -> Result<(), ConvertError> {
    let file = std::fs::File::create(path).map_err(|e| ConvertError::io(path, e))?;
    let mut out = std::io::BufWriter::new(file);
    writer.write(&mut out)?;
    std::io::Write::flush(&mut out).map_err(|e| ConvertError::io(path, e))
}

/// A GGUF writer holding `source`'s metadata (with `general.file_type` = `file_type`) and its
/// tensors converted to the types `rule` picks. `on_tensor` is called after each tensor.
pub fn retype(
    source: &ModelSource,
    rule: &dyn Fn(&SourceTensor) -> DType,
    file_type: u32,
    on_tensor: &mut dyn FnMut(&TensorPlan),
) -> Result<GgufWriter, ConvertError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut encode = |t: &SourceTensor| -> Result<(DType, Vec<u8>), ConvertError> {
        let to = rule(t);
        let bytes = match t.gguf_bytes() {
            Some(raw) if to == t.dtype() => raw.to_vec(),
            _ => encode_threads(to, &t.to_f32()?, t.row_len(), threads),
        };
        Ok((to, bytes))
    };
    retype_with(source, &mut encode, file_type, on_tensor)
}

/// Like [`retype`], with each tensor's type and bytes computed by `encode`.
pub fn retype_with<E>(
    source: &ModelSource,
    encode: &mut dyn FnMut(&SourceTensor) -> Result<Encoded, E>,
    file_type: u32,
    on_tensor: &mut dyn FnMut(&TensorPlan),
) -> Result<GgufWriter, E>
where
    E: From<ConvertError> + From<kestrel_model::weights::gguf::GgufWriteError>,
{
    let mut writer = GgufWriter::new();
    for (key, value) in &source.metadata {
        if key != FILE_TYPE && key != QUANT_VERSION {
            writer.add_metadata(key, value.clone())?;
        }
    }
    writer.add_metadata(FILE_TYPE, MetaValue::U32(file_type))?;
    let mut quantized = false;
    for t in &source.tensors {
        let start = Instant::now();
        let (to, bytes) = encode(t)?;
        quantized |= to.is_quantized();
        writer.add_tensor(&t.name, to, t.shape(), bytes)?;
        on_tensor(&TensorPlan {
            name: t.name.clone(),
            shape: t.shape().to_vec(),
            from: t.dtype(),
            to,
            seconds: start.elapsed().as_secs_f64(),
        });
    }
    if quantized {
        writer.add_metadata(QUANT_VERSION, MetaValue::U32(2))?;
    }
    Ok(writer)
}
