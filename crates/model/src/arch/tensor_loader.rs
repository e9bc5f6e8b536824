//! [`TensorLoader`]: fetches a model's tensors by name from a [`TensorSource`], checks their
//! shapes, and builds the layers (linears with their biases, input permutations and outlier
//! columns; norms).

use super::fused_qkv::FusedQkv;
use super::naming::{LayerTensor, TensorNaming};
use crate::config::NormKind;
use crate::error::ModelError;
use crate::layers::to_f32_vec;
use crate::layers::{BlockNorm, LayerNorm, Linear, OutlierColumns, RmsNorm, WeightMatrix};
use crate::weights::{outlier_weight_name, TensorSource, TensorView};

/// Loads tensors by name and checks their shapes.
pub(crate) struct TensorLoader<'a> {
    pub src: &'a dyn TensorSource,
    pub naming: TensorNaming,
    /// Added to every norm weight (Gemma HF checkpoints store `w` of `1 + w`).
    pub norm_offset: f32,
}

impl TensorLoader<'_> {
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<TensorView, ModelError> {
        let view = self
            .src
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        if view.shape != shape {
            return Err(ModelError::BadShape {
                name: name.into(),
                expected: shape.to_vec(),
                actual: view.shape,
            });
        }
        Ok(view)
    }

    /// Whether the source has tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.src.tensor(name).is_some()
    }

    /// The `[rows, cols]` linear `t` of `layer`, with its bias when the source has one.
    pub fn linear(
        &self,
        layer: usize,
        t: LayerTensor,
        rows: usize,
        cols: usize,
    ) -> Result<Linear, ModelError> {
        let view = self.get(&self.naming.layer(layer, t, "weight"), &[rows, cols])?;
        let bias_name = self.naming.layer(layer, t, "bias");
        let bias = match self.has(&bias_name) {
            true => Some(to_f32_vec(&self.get(&bias_name, &[rows])?)?),
            false => None,
        };
        let name = view.name.clone();
        let mut linear = Linear::new(view, bias)?.packed();
        if let Some(perm) = self.src.input_perm(&name) {
            linear = linear.with_input_perm(&name, perm)?;
        }
        match self.src.outlier_columns(&name) {
            Some(channels) => Ok(linear.with_outliers(self.outliers(&name, channels, rows, cols)?)),
            None => Ok(linear),
        }
    }

    /// A linear that must have a bias when `bias` is set (it is read whenever it is present).
    pub fn linear_with_bias(
        &self,
        i: usize,
        t: LayerTensor,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<Linear, ModelError> {
        let bias_name = self.naming.layer(i, t, "bias");
        if bias && !self.has(&bias_name) {
            return Err(ModelError::MissingTensor(bias_name));
        }
        self.linear(i, t, rows, cols)
    }

    /// The outlier channels of matrix `name` and their weights.
    fn outliers(
        &self,
        name: &str,
        channels: Vec<u32>,
        rows: usize,
        cols: usize,
    ) -> Result<OutlierColumns, ModelError> {
        let weight = self.get(&outlier_weight_name(name), &[rows, channels.len()])?;
        OutlierColumns::new(name, channels, WeightMatrix::new(weight)?, rows, cols)
    }

    pub fn norm(&self, name: &str, len: usize, eps: f32) -> Result<RmsNorm, ModelError> {
        Ok(RmsNorm::new(self.get(name, &[len])?, eps)?.with_offset(self.norm_offset))
    }

    pub fn layer_norm(
        &self,
        i: usize,
        t: LayerTensor,
        len: usize,
        eps: f32,
    ) -> Result<RmsNorm, ModelError> {
        self.norm(&self.naming.layer(i, t, "weight"), len, eps)
    }

    /// A norm of `kind` whose weight is `weight_name` (a LayerNorm's bias: the same name
    /// ending in `bias`).
    pub fn block_norm(
        &self,
        weight_name: &str,
        len: usize,
        eps: f32,
        kind: NormKind,
    ) -> Result<BlockNorm, ModelError> {
        match kind {
            NormKind::Rms => Ok(BlockNorm::Rms(self.norm(weight_name, len, eps)?)),
            NormKind::Layer => {
                let stem = weight_name.strip_suffix("weight").unwrap_or(weight_name);
                let bias = self.get(&format!("{stem}bias"), &[len])?;
                Ok(BlockNorm::Layer(LayerNorm::new(
                    self.get(weight_name, &[len])?,
                    bias,
                    eps,
                )?))
            }
        }
    }

    /// Layer `i`'s norm `t` of `kind`.
    pub fn layer_block_norm(
        &self,
        i: usize,
        t: LayerTensor,
        len: usize,
        eps: f32,
        kind: NormKind,
    ) -> Result<BlockNorm, ModelError> {
        self.block_norm(&self.naming.layer(i, t, "weight"), len, eps, kind)
    }

    /// Layer `i`'s fused QKV projection (`[3·n_heads·head_dim, hidden]`, bias if present),
    /// split into q, k and v.
    pub fn fused_qkv(
        &self,
        i: usize,
        (n_heads, head_dim): (usize, usize),
        hidden: usize,
    ) -> Result<FusedQkv, ModelError> {
        let rows = 3 * n_heads * head_dim;
        let weight = self.get(
            &self.naming.layer(i, LayerTensor::Qkv, "weight"),
            &[rows, hidden],
        )?;
        let bias_name = self.naming.layer(i, LayerTensor::Qkv, "bias");
        let bias = match self.has(&bias_name) {
            true => Some(self.get(&bias_name, &[rows])?),
            false => None,
        };
        let order = self.naming.qkv_order();
        FusedQkv::split(&weight, bias.as_ref(), order, (n_heads, head_dim))
    }

    /// Layer `i`'s attention sinks, one logit per query head (GGUF `blk.N.attn_sinks.weight`,
    /// HF `model.layers.N.self_attn.sinks`).
    pub fn sinks(&self, i: usize, n_heads: usize) -> Result<Vec<f32>, ModelError> {
        let name = match self.naming {
            TensorNaming::Gguf => format!("blk.{i}.attn_sinks.weight"),
            _ => {
                let q = self.naming.layer(i, LayerTensor::Q, "weight");
                let stem = q.strip_suffix("q_proj.weight").unwrap_or(&q);
                format!("{stem}sinks")
            }
        };
        to_f32_vec(&self.get(&name, &[n_heads])?)
    }
}
