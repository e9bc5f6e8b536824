//! [`Gptq`]: calibration with Hessian accumulation, then every layer linear quantized with
//! [`gptq_prepared`], the V projections with the attention-weighted Hessian
//! ([`key_weights`](crate::quantize::attn_weights::key_weights)). With `act_order` each
//! tensor's column permutation is stored as the metadata array
//! `kestrel.input_perm.<tensor name>` (u32).

use std::collections::HashMap;

use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;
use kestrel_model::arch::LinearSite;
use kestrel_model::weights::gguf::{GgufWriter, MetaArray, MetaValue, INPUT_PERM_KEY_PREFIX};

use super::{required_text, round_to_nearest, CalibRun, Env, QuantizeMethod};
use crate::codec::rtn::GridKind;
use crate::codec::{pack, PackedLinear};
use crate::convert::SourceTensor;
use crate::plan::TensorPlan;
use crate::quantize::calib::{Calibration, SiteStats};
use crate::quantize::gptq::{gptq_prepared, prepare, GptqConfig, Prepared};
use crate::quantize::toolkit::CalibText;
use crate::quantize::{QuantMethod, QuantOptions, QuantizeError};

/// A site's prepared Hessian is keyed by layer, site and whether the tensor is the V
/// projection (which has its own).
type SiteKey = (usize, LinearSite, bool);

/// GPTQ, group-wise INT4 or per-channel INT8.
pub(in crate::quantize) struct Gptq {
    opts: QuantOptions,
    /// The prepared Hessian of the site being quantized (tensors come site by site).
    prepared: HashMap<SiteKey, Prepared>,
    /// Column permutations (`act_order`) by tensor name, in tensor order.
    perms: Vec<(String, Vec<u32>)>,
}

impl Gptq {
    pub fn new(opts: &QuantOptions) -> Gptq {
        Gptq {
            opts: opts.clone(),
            prepared: HashMap::new(),
            perms: Vec::new(),
        }
    }
}

impl QuantizeMethod for Gptq {
    fn calibration<'a>(
        &mut self,
        text: Option<&'a CalibText>,
    ) -> Result<Option<CalibRun<'a>>, QuantizeError> {
        required_text(QuantMethod::Gptq, text, true)
    }

    fn encode(
        &mut self,
        env: &Env<'_>,
        t: &SourceTensor,
        values: Vec<f32>,
        to: DType,
        stats: Option<&Calibration>,
    ) -> Result<(DType, Vec<u8>), QuantizeError> {
        let (Some((layer, site)), Some(s)) = (LinearSite::of_tensor(&t.name), stats) else {
            return Ok(round_to_nearest(env, t, &values, to));
        };
        if to == DType::Q8_0 {
            return Ok(round_to_nearest(env, t, &values, to));
        }
        let key = (layer, site, is_value_projection(&t.name));
        if !self.prepared.contains_key(&key) {
            self.prepared.clear();
            let prep = prepare_site(t, s.site(layer, site), key.2, &self.opts)?;
            self.prepared.insert(key, prep);
        }
        let (dtype, bytes, perm) =
            gptq_tensor(t, &values, &self.prepared[&key], &self.opts, env.pool)?;
        if let Some(p) = perm {
            self.perms.push((t.name.clone(), p));
        }
        Ok((dtype, bytes))
    }

    /// `gptq 4-bit g128 act-order damp 0.01`, `gptq 8-bit per-channel damp 0.1`.
    fn describe(&self) -> String {
        let o = &self.opts;
        if o.bits == 8 {
            return format!("gptq 8-bit per-channel damp {}", o.damp);
        }
        format!(
            "gptq 4-bit g{}{} damp {}",
            o.group,
            if o.act_order { " act-order" } else { "" },
            o.damp
        )
    }

    fn finish(
        &mut self,
        writer: &mut GgufWriter,
        _on_tensor: &mut dyn FnMut(&TensorPlan),
    ) -> Result<(), QuantizeError> {
        for (name, perm) in std::mem::take(&mut self.perms) {
            writer.add_metadata(
                &format!("{INPUT_PERM_KEY_PREFIX}{name}"),
                MetaValue::Array(MetaArray::U32(perm)),
            )?;
        }
        Ok(())
    }
}

/// Whether GGUF tensor `name` is a V projection.
fn is_value_projection(name: &str) -> bool {
    name.ends_with(".attn_v.weight")
}

/// The GPTQ preparation of the Hessian of `t`'s input site: for the V projection the
/// attention-weighted one ([`SiteStats::value_hessian`]).
fn prepare_site(
    t: &SourceTensor,
    stats: Option<&SiteStats>,
    value: bool,
    opts: &QuantOptions,
) -> Result<Prepared, QuantizeError> {
    let cols = t.row_len();
    let h = stats
        .and_then(|s| {
            if value {
                s.value_hessian.as_deref()
            } else {
                s.hessian.as_deref()
            }
        })
        .filter(|h| h.len() == cols * cols)
        .ok_or_else(|| {
            QuantizeError::Calibration(format!("no calibration statistics reached {}", t.name))
        })?;
    prepare(h, cols, opts.act_order, opts.damp).map_err(|source| QuantizeError::Gptq {
        tensor: t.name.clone(),
        source,
    })
}

/// GPTQ one layer linear, with its site's prepared Hessian.
fn gptq_tensor(
    t: &SourceTensor,
    values: &[f32],
    prep: &Prepared,
    opts: &QuantOptions,
    pool: &ThreadPool,
) -> Result<PackedLinear, QuantizeError> {
    let (rows, cols) = (t.shape()[0], t.row_len());
    let (group, kind) = match opts.bits {
        8 => (cols, GridKind::Symmetric8),
        _ => (
            QuantMethod::Gptq.dtype(opts, cols).block_size(),
            GridKind::Asymmetric(4),
        ),
    };
    let cfg = GptqConfig {
        group,
        kind,
        act_order: opts.act_order,
        damp: opts.damp,
    };
    let q = gptq_prepared(pool, values, rows, prep, cfg);
    let (dtype, bytes) = pack(&q)?;
    Ok((dtype, bytes, q.perm))
}
