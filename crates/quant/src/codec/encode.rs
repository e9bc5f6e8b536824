//! [`encode`]: `f32` values into the stored bytes of a [`DType`], with the reference
//! quantizers of `kestrel_kernels::quant` (the spec; bit-compatible with ggml's `_ref`
//! quantizers for the legacy types, simpler searches for Q2_K, Q3_K, IQ4_NL and IQ4_XS,
//! whose files are normally made by llama.cpp).

use half::{bf16, f16};
use kestrel_kernels::quant::{
    int4, int8, iq4_nl, iq4_xs, mxfp4, nf4, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q6_k, q8_0,
};
use kestrel_kernels::DType;

use super::pack::pack;
use super::rtn::{quantize_rtn, GridKind};

/// A tensor's storage type and its bytes.
pub type Encoded = (DType, Vec<u8>);

/// A reference quantizer of one row.
type QuantizeRow = fn(&[f32], &mut [u8]);

/// Encode `values` (one row, a whole number of `dtype` blocks) as `dtype`, on one thread.
///
/// # Panics
/// If `values.len()` is not a multiple of `dtype.block_size()` (callers pick a fitting type
/// with `quantize::fitting_type`), or `dtype` is one of the grid i-quants (IQ1_*, IQ2_*,
/// IQ3_*), which Kestrel reads but has no quantizer for (`QuantMethod` refuses them).
pub fn encode(dtype: DType, values: &[f32]) -> Vec<u8> {
    encode_rows(dtype, values, values.len())
}

/// Encode the rows of `row_len` values in `values` as `dtype`: Kestrel's own types row by
/// row (they carry per-row headers or per-group grids), the GGUF types block by block.
pub fn encode_rows(dtype: DType, values: &[f32], row_len: usize) -> Vec<u8> {
    if let Some(group) = int4_group(dtype) {
        let rows = values.len() / row_len;
        let q = quantize_rtn(values, rows, row_len, group, GridKind::Asymmetric(4));
        // The type was chosen for this group size, so packing cannot fail.
        return pack(&q).map(|(_, b)| b).unwrap_or_else(|e| panic!("{e}"));
    }
    let row_wise: Option<QuantizeRow> = match dtype {
        DType::INT8 => Some(int8::quantize_row_ref),
        DType::NF4_DQ => Some(nf4::quantize_row_ref),
        _ => None,
    };
    if let Some(quantize_row) = row_wise {
        let row_bytes = dtype
            .row_bytes(row_len)
            .unwrap_or_else(|| panic!("{dtype}: {row_len} is not whole blocks"));
        let mut out = vec![0u8; values.len() / row_len * row_bytes];
        for (src, dst) in values
            .chunks_exact(row_len)
            .zip(out.chunks_exact_mut(row_bytes))
        {
            quantize_row(src, dst);
        }
        return out;
    }
    encode_blocks(dtype, values)
}

fn int4_group(dtype: DType) -> Option<usize> {
    [32, 64, 128]
        .into_iter()
        .find(|g| int4::dtype_for_group(*g) == Some(dtype))
}

/// The block types, whose rows are just their blocks.
fn encode_blocks(dtype: DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F32 => bytemuck::cast_slice(values).to_vec(),
        DType::F16 => values
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::BF16 => values
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::Q4_0 => bytemuck::cast_slice(&q4_0::quantize_ref(values)).to_vec(),
        DType::Q4_1 => bytemuck::cast_slice(&q4_1::quantize_ref(values)).to_vec(),
        DType::Q5_0 => bytemuck::cast_slice(&q5_0::quantize_ref(values)).to_vec(),
        DType::Q8_0 => bytemuck::cast_slice(&q8_0::quantize_ref(values)).to_vec(),
        DType::Q4_K => bytemuck::cast_slice(&q4_k::quantize_ref(values)).to_vec(),
        DType::Q6_K => bytemuck::cast_slice(&q6_k::quantize_ref(values)).to_vec(),
        DType::Q5_K => {
            bytemuck::cast_slice(&kestrel_kernels::quant::q5_k::quantize_ref(values)).to_vec()
        }
        DType::Q5_1 => bytemuck::cast_slice(&q5_1::quantize_ref(values)).to_vec(),
        DType::Q2_K => bytemuck::cast_slice(&q2_k::quantize_ref(values)).to_vec(),
        DType::Q3_K => bytemuck::cast_slice(&q3_k::quantize_ref(values)).to_vec(),
        DType::IQ4_NL => bytemuck::cast_slice(&iq4_nl::quantize_ref(values)).to_vec(),
        DType::IQ4_XS => bytemuck::cast_slice(&iq4_xs::quantize_ref(values)).to_vec(),
        DType::NF4 => bytemuck::cast_slice(&nf4::quantize_ref(values)).to_vec(),
        DType::MXFP4 => bytemuck::cast_slice(&mxfp4::quantize_ref(values)).to_vec(),
        DType::IQ2_XXS
        | DType::IQ2_XS
        | DType::IQ2_S
        | DType::IQ3_XXS
        | DType::IQ3_S
        | DType::IQ1_S
        | DType::IQ1_M => panic!("{dtype}: Kestrel has no quantizer for this type"),
        other => unreachable!("{other} is encoded row-wise by encode_rows"),
    }
}

/// [`encode`] a `[rows, row_len]` matrix with its rows split over `threads` threads; the
/// bytes are identical to the single-threaded result.
pub fn encode_threads(dtype: DType, values: &[f32], row_len: usize, threads: usize) -> Vec<u8> {
    let rows = values.len() / row_len.max(1);
    let threads = threads.clamp(1, rows.max(1));
    if threads == 1 || row_len == 0 {
        return encode_rows(dtype, values, row_len.max(1));
    }
    let per = rows.div_ceil(threads) * row_len;
    let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = values
            .chunks(per)
            .map(|c| s.spawn(move || encode_rows(dtype, c, row_len)))
            .collect();
        // A worker only panics if `encode` does, which the caller's type choice rules out;
        // re-raise it here rather than return a partial tensor.
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    parts.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threaded_encoding_equals_single_threaded() {
        let values: Vec<f32> = (0..7 * 256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        for dtype in [DType::Q4_K, DType::Q8_0, DType::F16] {
            assert_eq!(
                encode_threads(dtype, &values, 256, 3),
                encode(dtype, &values),
                "{dtype}"
            );
        }
        assert_eq!(encode(DType::F32, &[1.0]), 1f32.to_le_bytes().to_vec());
    }
}
