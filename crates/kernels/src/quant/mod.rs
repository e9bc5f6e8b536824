//! GGUF tensor types: block layouts, reference kernels (the spec) and SIMD variants.
//!
//! Every quantized type stores a row of `n` weights as `n / block_size` fixed-size blocks,
//! preceded by [`DType::row_header_bytes`] bytes of per-row data (zero for every GGUF type;
//! a per-row scale for Kestrel's [`DType::INT8`], double-quantization constants for
//! [`DType::NF4_DQ`]).
//! A weight row is multiplied with an activation row that was first converted into the
//! type's [`ActFormat`] (8-bit blocks for the quantized types, plain `f32` for float types),
//! so the inner loop is an integer dot product.
//!
//! Each format module (`q4_0.rs`, `q4_k.rs`, ...) holds a `#[repr(C)]` block struct with a
//! compile-time size assert, a scalar `reference` implementation and x86 variants, and exposes
//! `kernels(isa) -> TypeKernels`: the fastest variant that `isa` can run. [`kernels`] picks the
//! variant for the detected CPU once.

use std::sync::OnceLock;

use crate::cpu::Isa;

pub mod act;
pub(crate) mod dispatch;
pub mod float;
mod float_tile;
pub mod format;
pub(crate) mod grid_quant;
pub mod int4;
pub mod int8;
pub mod iq1_m;
pub mod iq1_s;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq4_nl;
pub mod iq4_xs;
pub(crate) mod iq_grids;
pub mod mxfp4;
pub mod nf4;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_k;
pub(crate) mod rows;
pub(crate) mod scale_min;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use format::QuantFormat;

/// Tensor element types, with their GGUF (`ggml_type`) ids as discriminants. Variant names
/// follow GGUF's own spelling (`Q4_K`), which every model card and tool uses.
///
/// Ids from 1024 up are Kestrel's own quantization-toolkit types (not ggml types; GGUF files
/// holding them load only in Kestrel): [`DType::INT8`] (per-channel int8, `int8.rs`),
/// [`DType::INT4_G32`] / `_G64` / `_G128` (group-wise asymmetric 4-bit, `int4.rs`),
/// [`DType::NF4`] and [`DType::NF4_DQ`] (bitsandbytes NormalFloat-4, `nf4.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(non_camel_case_types)]
pub enum DType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    IQ1_M = 29,
    BF16 = 30,
    MXFP4 = 39,
    INT8 = 1024,
    INT4_G32 = 1025,
    INT4_G64 = 1026,
    INT4_G128 = 1027,
    NF4 = 1028,
    NF4_DQ = 1029,
}

impl DType {
    /// Every supported type: the GGUF types, then Kestrel's own.
    pub const ALL: [DType; 29] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::IQ2_XXS,
        DType::IQ2_XS,
        DType::IQ2_S,
        DType::IQ3_XXS,
        DType::IQ3_S,
        DType::IQ1_S,
        DType::IQ1_M,
        DType::MXFP4,
        DType::INT8,
        DType::INT4_G32,
        DType::INT4_G64,
        DType::INT4_G128,
        DType::NF4,
        DType::NF4_DQ,
    ];

    /// Whether this is one of Kestrel's own types (id >= 1024), unknown to ggml.
    pub const fn is_kestrel_only(self) -> bool {
        self as u32 >= 1024
    }

    /// The type with GGUF id `id`, or `None` for ids Kestrel does not support.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        Self::ALL.into_iter().find(|t| *t as u32 == id)
    }

    /// Elements per block.
    pub const fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 => 32,
            DType::IQ4_NL | DType::MXFP4 => 32,
            DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K => 256,
            DType::IQ4_XS | DType::IQ2_XXS | DType::IQ2_XS | DType::IQ2_S => 256,
            DType::IQ3_XXS | DType::IQ3_S | DType::IQ1_S | DType::IQ1_M => 256,
            DType::INT8 | DType::INT4_G32 => 32,
            DType::INT4_G64 | DType::NF4 | DType::NF4_DQ => 64,
            DType::INT4_G128 => 128,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q2_K => 84,
            DType::Q3_K => 110,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
            DType::IQ4_NL => 18,
            DType::IQ4_XS => 136,
            DType::IQ2_XXS => 66,
            DType::IQ2_XS => 74,
            DType::IQ2_S => 82,
            DType::IQ3_XXS => 98,
            DType::IQ3_S => 110,
            DType::IQ1_S => 50,
            DType::IQ1_M => 56,
            DType::MXFP4 => 17,
            DType::INT8 => 32,
            DType::INT4_G32 => 20,
            DType::INT4_G64 => 36,
            DType::INT4_G128 => 68,
            DType::NF4 => 36,
            DType::NF4_DQ => 33,
        }
    }

    /// Bytes stored once per row, before the row's blocks: `INT8`'s `f32` scale (4),
    /// `NF4_DQ`'s `f32` pair `(c, offset)` (8); 0 for every other type.
    pub const fn row_header_bytes(self) -> usize {
        match self {
            DType::INT8 => 4,
            DType::NF4_DQ => 8,
            _ => 0,
        }
    }

    /// Bytes for a row of `n` elements (header included), or `None` if `n` is not a whole
    /// number of blocks (or the size overflows `usize`).
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size())
            .checked_mul(self.block_bytes())?
            .checked_add(self.row_header_bytes())
    }

    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Average storage bits per weight of the blocks, excluding the per-row header (see
    /// [`DType::bits_per_weight_for`]).
    pub fn bits_per_weight(self) -> f64 {
        self.block_bytes() as f64 * 8.0 / self.block_size() as f64
    }

    /// Average storage bits per weight of a row of `n` elements, header included; `None` if
    /// `n` is zero or not a whole number of blocks.
    pub fn bits_per_weight_for(self, n: usize) -> Option<f64> {
        let bytes = self.row_bytes(n).filter(|_| n > 0)?;
        Some(bytes as f64 * 8.0 / n as f64)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q2_K => "Q2_K",
            DType::Q3_K => "Q3_K",
            DType::Q4_K => "Q4_K",
            DType::Q5_K => "Q5_K",
            DType::Q6_K => "Q6_K",
            DType::IQ4_NL => "IQ4_NL",
            DType::IQ4_XS => "IQ4_XS",
            DType::IQ2_XXS => "IQ2_XXS",
            DType::IQ2_XS => "IQ2_XS",
            DType::IQ2_S => "IQ2_S",
            DType::IQ3_XXS => "IQ3_XXS",
            DType::IQ3_S => "IQ3_S",
            DType::IQ1_S => "IQ1_S",
            DType::IQ1_M => "IQ1_M",
            DType::MXFP4 => "MXFP4",
            DType::INT8 => "INT8",
            DType::INT4_G32 => "INT4_G32",
            DType::INT4_G64 => "INT4_G64",
            DType::INT4_G128 => "INT4_G128",
            DType::NF4 => "NF4",
            DType::NF4_DQ => "NF4_DQ",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The form an activation row takes before it is multiplied with a weight row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActFormat {
    /// Plain little-endian `f32` (for F32/F16/BF16 weights).
    F32,
    /// Blocks of 32: `f16` scale + 32 × `i8` (34 bytes). Pairs with Q4_0, Q5_0, Q8_0, IQ4_NL,
    /// MXFP4.
    Q8_0,
    /// Blocks of 32: `f16` scale, `f16` scale × sum of quants, 32 × `i8` (36 bytes). Pairs with Q4_1, Q5_1.
    Q8_1,
    /// Blocks of 256: `f32` scale, 256 × `i8`, 16 × `i16` sums of each 16 quants (292 bytes).
    /// Pairs with the K-quants, IQ4_XS and the grid i-quants (IQ1_*, IQ2_*, IQ3_*).
    Q8K,
    /// One `f32` scale per row, then `n` × `i8` (`row_bytes(n) = 4 + n`): per-token dynamic
    /// int8, `scale = amax / 127`. Pairs with [`DType::INT8`] (W8A8).
    I8Row,
}

impl ActFormat {
    pub const fn block_size(self) -> usize {
        match self {
            ActFormat::F32 => 1,
            ActFormat::Q8_0 | ActFormat::Q8_1 => 32,
            ActFormat::Q8K => 256,
            ActFormat::I8Row => 32,
        }
    }

    pub const fn block_bytes(self) -> usize {
        match self {
            ActFormat::F32 => 4,
            ActFormat::Q8_0 => 34,
            ActFormat::Q8_1 => 36,
            ActFormat::Q8K => 292,
            ActFormat::I8Row => 32,
        }
    }

    /// Bytes stored once per row before the blocks (the `f32` scale of `I8Row`).
    pub const fn row_header_bytes(self) -> usize {
        match self {
            ActFormat::I8Row => 4,
            _ => 0,
        }
    }

    /// Bytes for an activation row of `n` elements (`n` a multiple of the block size),
    /// header included.
    pub const fn row_bytes(self, n: usize) -> usize {
        self.row_header_bytes() + n / self.block_size() * self.block_bytes()
    }

    /// Convert `src` into this format, writing `row_bytes(src.len())` bytes to `dst`.
    pub fn quantize(self, src: &[f32], dst: &mut [u8]) {
        (act::kernels().quantize[self as usize])(src, dst)
    }
}

/// The kernels of one [`DType`] for one ISA.
#[derive(Clone, Copy)]
pub struct TypeKernels {
    pub dtype: DType,
    /// Which ISA this set was compiled for (the weakest among its functions).
    pub isa: Isa,
    /// The activation format `vec_dot` expects.
    pub act: ActFormat,
    /// Dequantize one row: `src` holds exactly the blocks of `dst.len()` elements.
    pub dequantize: fn(src: &[u8], dst: &mut [f32]),
    /// Dot product of `n` elements: weight row `w` (this dtype) with activation row `a`
    /// (in `act` format).
    pub vec_dot: fn(n: usize, w: &[u8], a: &[u8]) -> f32,
    /// Optional multi-row kernel: a [`TILE`] × [`TILE`] tile of `vec_dot` products, each
    /// weight block loaded once for several activation rows (prefill, batched decode).
    pub vec_dot_tile: Option<VecDotTileFn>,
    /// Optional `m == 1` kernel: [`TILE`] weight rows against one activation row, each
    /// activation block loaded once (decode).
    pub vec_dot_rows: Option<VecDotRowsFn>,
}

/// `out[r] = vec_dot(n, w[r], a)` for [`TILE`] weight rows (rows may repeat, to pad).
pub type VecDotRowsFn = fn(n: usize, w: [&[u8]; TILE], a: &[u8]) -> [f32; TILE];

/// Weight rows and activation rows per [`VecDotTileFn`] call.
pub const TILE: usize = 4;

/// `out[j][r] = vec_dot(n, w[r], a[j])` for `TILE` weight rows and `TILE` activation rows
/// (rows may repeat, to pad a partial tile). Results equal `vec_dot`'s up to `f32` rounding.
pub type VecDotTileFn = fn(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE];

impl TypeKernels {
    /// The fastest kernels for `dtype` that `isa` can run.
    pub fn for_isa(dtype: DType, isa: Isa) -> TypeKernels {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => float::kernels(dtype, isa),
            DType::Q4_0 => q4_0::kernels(isa),
            DType::Q4_1 => q4_1::kernels(isa),
            DType::Q5_0 => q5_0::kernels(isa),
            DType::Q5_1 => q5_1::kernels(isa),
            DType::Q8_0 => q8_0::kernels(isa),
            DType::Q2_K => q2_k::kernels(isa),
            DType::Q3_K => q3_k::kernels(isa),
            DType::Q4_K => q4_k::kernels(isa),
            DType::Q5_K => q5_k::kernels(isa),
            DType::Q6_K => q6_k::kernels(isa),
            DType::IQ4_NL => iq4_nl::kernels(isa),
            DType::IQ4_XS => iq4_xs::kernels(isa),
            DType::IQ2_XXS => iq2_xxs::kernels(isa),
            DType::IQ2_XS => iq2_xs::kernels(isa),
            DType::IQ2_S => iq2_s::kernels(isa),
            DType::IQ3_XXS => iq3_xxs::kernels(isa),
            DType::IQ3_S => iq3_s::kernels(isa),
            DType::IQ1_S => iq1_s::kernels(isa),
            DType::IQ1_M => iq1_m::kernels(isa),
            DType::MXFP4 => mxfp4::kernels(isa),
            DType::INT8 => int8::kernels(isa),
            DType::INT4_G32 => int4::kernels::<1>(isa),
            DType::INT4_G64 => int4::kernels::<2>(isa),
            DType::INT4_G128 => int4::kernels::<4>(isa),
            DType::NF4 => nf4::kernels(isa, false),
            DType::NF4_DQ => nf4::kernels(isa, true),
        }
    }
}

/// The kernels for `dtype` on this CPU, chosen once.
pub fn kernels(dtype: DType) -> &'static TypeKernels {
    static TABLE: OnceLock<Vec<TypeKernels>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let isa = Isa::detected();
        DType::ALL
            .iter()
            .map(|&t| TypeKernels::for_isa(t, isa))
            .collect()
    });
    let idx = DType::ALL
        .iter()
        .position(|t| *t == dtype)
        .expect("DType::ALL lists every variant");
    &table[idx]
}

/// Dequantize a row of `dst.len()` elements of type `dtype` from `src`.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) {
    (kernels(dtype).dequantize)(src, dst)
}
