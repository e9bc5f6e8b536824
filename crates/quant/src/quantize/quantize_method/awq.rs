//! [`Awq`]: calibration text runs through the unquantized model, per-layer input scales are
//! searched ([`search_scales`]), folded into the norms and up projections, then every matrix
//! is quantized group-wise INT4.

use super::{required_text, CalibRun, Env, Overrides, QuantizeMethod};
use crate::codec::rtn::GridKind;
use crate::quantize::awq::{search_scales, AwqConfig, Weight};
use crate::quantize::calib::{Calibration, SiteStats};
use crate::quantize::fold::fold_scales;
use crate::quantize::toolkit::CalibText;
use crate::quantize::{QuantMethod, QuantOptions, QuantizeError};

/// Activation-aware weight quantization.
pub(in crate::quantize) struct Awq {
    opts: QuantOptions,
}

impl Awq {
    pub fn new(opts: &QuantOptions) -> Awq {
        Awq { opts: opts.clone() }
    }
}

impl QuantizeMethod for Awq {
    fn calibration<'a>(
        &mut self,
        text: Option<&'a CalibText>,
    ) -> Result<Option<CalibRun<'a>>, QuantizeError> {
        required_text(QuantMethod::Awq, text, false)
    }

    fn prepare(
        &mut self,
        env: &Env<'_>,
        stats: &Calibration,
        stage: &mut dyn FnMut(&str),
    ) -> Result<Overrides, QuantizeError> {
        stage("searching AWQ scales");
        let opts = &self.opts;
        let choose = |st: &SiteStats, ws: &[Weight<'_>], cols: usize| {
            let group = QuantMethod::Awq.dtype(opts, cols).block_size();
            let cfg = AwqConfig {
                group,
                kind: GridKind::Asymmetric(4),
                n_grid: opts.awq_grid,
            };
            search_scales(env.pool, &st.sample, &st.mean_abs(), ws, cfg).0
        };
        Ok(fold_scales(env.source, stats, &choose, false)?.0)
    }

    fn describe(&self) -> String {
        format!("{} g{}", QuantMethod::Awq.name(), self.opts.group)
    }
}
