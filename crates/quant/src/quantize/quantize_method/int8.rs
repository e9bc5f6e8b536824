//! [`Int8`]: per-output-channel symmetric INT8. With `outliers > 0` each linear layer's input
//! channels of largest activation magnitude, measured on the calibration text or, without
//! text, on pseudo-random token windows, are split off (F16 weights beside the INT8 matrix,
//! metadata array `kestrel.outlier_cols.<tensor name>`, tensor `<name>.outlier_weight`). With
//! calibration text, optional SmoothQuant smoothing comes first ([`Smoothing`]: one α, or per
//! site the α among 0.3..0.8 or none whose W8A8 output error on the sampled rows is
//! smallest).

use std::collections::HashMap;

use kestrel_kernels::DType;
use kestrel_model::arch::LinearSite;
use kestrel_model::weights::gguf::{GgufWriter, MetaArray, MetaValue, OUTLIER_COLS_KEY_PREFIX};
use kestrel_model::weights::outlier_weight_name;

use super::{round_to_nearest, CalibInput, CalibRun, Env, Overrides, QuantizeMethod};
use crate::codec::encode_threads;
use crate::convert::SourceTensor;
use crate::plan::TensorPlan;
use crate::quantize::awq::{search_smoothing, Weight};
use crate::quantize::calib::{Calibration, SiteStats};
use crate::quantize::fold::fold_scales;
use crate::quantize::outliers::{choose_channels, split_off};
use crate::quantize::toolkit::CalibText;
use crate::quantize::{QuantOptions, QuantizeError, Smoothing};

/// INT8 weights, with SmoothQuant and outlier channels when calibrated.
pub(in crate::quantize) struct Int8 {
    opts: QuantOptions,
    /// Whether calibration text was given (smoothing needs it; random tokens do not do).
    has_text: bool,
    /// The outlier input channels of each site.
    outlier_sets: HashMap<(usize, LinearSite), Vec<u32>>,
    /// The split-off channels of each matrix, written after the tensors.
    splits: Vec<SplitTensor>,
}

/// The outlier channels of a matrix and their F16 weights (`[rows, channels]`).
struct SplitTensor {
    name: String,
    rows: usize,
    channels: Vec<u32>,
    bytes: Vec<u8>,
}

impl Int8 {
    pub fn new(opts: &QuantOptions) -> Int8 {
        Int8 {
            opts: opts.clone(),
            has_text: false,
            outlier_sets: HashMap::new(),
            splits: Vec::new(),
        }
    }
}

impl QuantizeMethod for Int8 {
    fn calibration<'a>(
        &mut self,
        text: Option<&'a CalibText>,
    ) -> Result<Option<CalibRun<'a>>, QuantizeError> {
        if text.is_none() && self.opts.smoothing != Smoothing::Off {
            return Err(QuantizeError::NeedsCalibration {
                method: "int8 with SmoothQuant",
            });
        }
        self.has_text = text.is_some();
        Ok(match text {
            Some(c) => Some(CalibRun {
                input: CalibInput::Text(c),
                hessian: false,
                stage: "calibrating",
            }),
            None if self.opts.outliers > 0 => Some(CalibRun {
                input: CalibInput::Random,
                hessian: false,
                stage: "finding outlier channels on random tokens",
            }),
            None => None,
        })
    }

    fn prepare(
        &mut self,
        env: &Env<'_>,
        stats: &Calibration,
        stage: &mut dyn FnMut(&str),
    ) -> Result<Overrides, QuantizeError> {
        let mut overrides = Overrides::new();
        let mut scales = HashMap::new();
        if let Some(alphas) = smoothing_alphas(self.opts.smoothing).filter(|_| self.has_text) {
            stage("smoothing activations");
            let choose = |st: &SiteStats, ws: &[Weight<'_>], _: usize| {
                search_smoothing(env.pool, &st.sample, &st.abs_max, ws, &alphas)
            };
            (overrides, scales) = fold_scales(env.source, stats, &choose, true)?;
        }
        self.outlier_sets = choose_outliers(stats, &scales, self.opts.outliers);
        Ok(overrides)
    }

    fn encode(
        &mut self,
        env: &Env<'_>,
        t: &SourceTensor,
        mut values: Vec<f32>,
        to: DType,
        _stats: Option<&Calibration>,
    ) -> Result<(DType, Vec<u8>), QuantizeError> {
        let channels = LinearSite::of_tensor(&t.name)
            .filter(|_| to == DType::INT8)
            .and_then(|key| self.outlier_sets.get(&key));
        let Some(channels) = channels.cloned() else {
            return Ok(round_to_nearest(env, t, &values, to));
        };
        let w = split_off(&mut values, t.row_len(), &channels);
        let bytes = encode_threads(DType::F16, &w, channels.len(), env.threads);
        self.splits.push(SplitTensor {
            name: t.name.clone(),
            rows: t.shape()[0],
            channels,
            bytes,
        });
        Ok(round_to_nearest(env, t, &values, to))
    }

    fn describe(&self) -> String {
        format!(
            "int8 per-channel, per-token activations{}",
            int8_extras(&self.opts)
        )
    }

    fn finish(
        &mut self,
        writer: &mut GgufWriter,
        on_tensor: &mut dyn FnMut(&TensorPlan),
    ) -> Result<(), QuantizeError> {
        for t in std::mem::take(&mut self.splits) {
            let name = outlier_weight_name(&t.name);
            let shape = [t.rows, t.channels.len()];
            writer.add_tensor(&name, DType::F16, &shape, t.bytes)?;
            let plan = TensorPlan {
                name,
                shape: shape.to_vec(),
                from: DType::F32,
                to: DType::F16,
                seconds: 0.0,
            };
            on_tensor(&plan);
            writer.add_metadata(
                &format!("{OUTLIER_COLS_KEY_PREFIX}{}", t.name),
                MetaValue::Array(MetaArray::U32(t.channels)),
            )?;
        }
        Ok(())
    }
}

/// The α values to try, or `None` without smoothing.
fn smoothing_alphas(s: Smoothing) -> Option<Vec<f32>> {
    match s {
        Smoothing::Off => None,
        Smoothing::Alpha(a) => Some(vec![a]),
        Smoothing::Search => Some((3..=8).map(|i| i as f32 / 10.0).collect()),
    }
}

/// Up to `count` outlier channels per site, by calibration maxima (of the smoothed inputs,
/// `|x| / s`, where `scales` has the site's smoothing scales).
fn choose_outliers(
    calib: &Calibration,
    scales: &HashMap<(usize, LinearSite), Vec<f32>>,
    count: usize,
) -> HashMap<(usize, LinearSite), Vec<u32>> {
    calib
        .sites
        .iter()
        .map(|(key, st)| {
            let amax: Vec<f32> = match scales.get(key) {
                Some(s) => st.abs_max.iter().zip(s).map(|(a, s)| a / s).collect(),
                None => st.abs_max.clone(),
            };
            (*key, choose_channels(&amax, count))
        })
        .filter(|(_, c)| !c.is_empty())
        .collect()
}

/// What calibration added to INT8 (the options only take effect with calibration text).
fn int8_extras(o: &QuantOptions) -> String {
    let smooth = match o.smoothing {
        Smoothing::Off => String::new(),
        Smoothing::Alpha(a) => format!(", SmoothQuant alpha {a}"),
        Smoothing::Search => ", SmoothQuant alpha per site".into(),
    };
    let outliers = if o.outliers > 0 {
        format!(", up to {} F16 outlier channels", o.outliers)
    } else {
        String::new()
    };
    smooth + &outliers
}
