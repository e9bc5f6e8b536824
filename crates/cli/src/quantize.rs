//! `kestrel quantize`: a GGUF file or HF directory → a GGUF file quantized with one method
//! (GGUF block types, or Kestrel's INT8 / INT4 / AWQ / GPTQ / NF4), with a progress bar and
//! per-type totals.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use kestrel_quant::convert::{write_file, ModelSource};
use kestrel_quant::quantize::{quantize_with, CalibText, Progress, QuantMethod, QuantOptions};

#[derive(clap::Args)]
pub struct QuantizeArgs {
    /// A .gguf file or an HF checkpoint directory.
    pub input: PathBuf,
    /// The .gguf file to write.
    pub output: PathBuf,
    /// q8_0, q4_0, q4_1, q4_k, q6_k (GGUF types llama.cpp reads), int8, int4, awq, gptq or
    /// nf4 (Kestrel types).
    #[arg(long)]
    pub method: String,
    /// Columns per group for int4, awq and gptq (32, 64 or 128); rows that are not whole
    /// groups fall back to 64, then 32.
    #[arg(long, default_value_t = 128)]
    pub group: usize,
    /// GPTQ bits: 4 (group-wise) or 8 (per-channel, stored as INT8).
    #[arg(long, default_value_t = 4)]
    pub bits: u8,
    /// GPTQ: quantize columns in decreasing activation order (desc_act).
    #[arg(long)]
    pub act_order: bool,
    /// GPTQ dampening (fraction of the mean Hessian diagonal). 0.1 rather than the usual 0.01:
    /// with a few thousand calibration tokens the smaller value overfits them (measured on
    /// SmolLM2: worse than round-to-nearest on held-out text).
    #[arg(long, default_value_t = 0.1)]
    pub damp: f32,
    /// NF4: quantize the block scales to 8 bits as well.
    #[arg(long)]
    pub double_quant: bool,
    /// int8 with --calib: SmoothQuant smoothing before quantizing: `off`, a migration strength
    /// in (0, 1], or `auto` (per layer site among 0.3..0.8 or none, by the W8A8 output error on
    /// calibration rows).
    #[arg(long, default_value = "off")]
    pub smooth_alpha: String,
    /// int8: input channels per linear layer (at most 1/16 of its inputs) whose activations are
    /// largest, on the --calib text or else on pseudo-random tokens, kept in F16 beside the INT8
    /// weights (LLM.int8()-style decomposition); 0 gives plain W8A8.
    #[arg(long, default_value_t = 32)]
    pub outliers: usize,
    /// Calibration text (UTF-8): required by awq and gptq; int8 finds its outlier channels on
    /// it (--outliers) and needs it for SmoothQuant (--smooth-alpha).
    #[arg(long)]
    pub calib: Option<PathBuf>,
    /// Calibration tokens to use.
    #[arg(long, default_value_t = 4096)]
    pub calib_tokens: usize,
    /// Calibration window length in tokens.
    #[arg(long, default_value_t = 512)]
    pub calib_ctx: usize,
}

impl QuantizeArgs {
    fn options(&self) -> Result<QuantOptions> {
        Ok(QuantOptions {
            group: self.group,
            bits: self.bits,
            act_order: self.act_order,
            damp: self.damp,
            double_quant: self.double_quant,
            smoothing: self.smooth_alpha.parse()?,
            outliers: self.outliers,
            ..QuantOptions::default()
        })
    }

    fn calib_text(&self) -> Result<Option<CalibText>> {
        let Some(path) = &self.calib else {
            return Ok(None);
        };
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let text =
            String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))?;
        Ok(Some(CalibText {
            text,
            tokens: self.calib_tokens,
            ctx: self.calib_ctx,
        }))
    }
}

pub fn run(args: QuantizeArgs) -> Result<()> {
    let method: QuantMethod = args.method.parse()?;
    let opts = args.options()?;
    opts.validate(method)?;
    let calib = args.calib_text()?;
    let start = Instant::now();
    let source = ModelSource::open(&args.input)?;
    let bar = indicatif::ProgressBar::new(source.tensors.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} tensors [{elapsed_precise}] {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut by_type: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut stage = |s: &str| {
        bar.set_message(s.to_string());
        bar.tick();
        eprintln!("{s} ({:.1} s)", start.elapsed().as_secs_f64());
    };
    let mut tensor = |p: &kestrel_quant::quantize::TensorPlan| {
        let e = by_type.entry(p.to.name().to_string()).or_default();
        e.0 += 1;
        e.1 += p.shape.iter().product::<usize>();
        bar.set_message(format!("{} {} -> {}", p.name, p.from, p.to));
        if bar.position() >= bar.length().unwrap_or(0) {
            bar.inc_length(1); // tensors a method adds (INT8 outlier weights)
        }
        bar.inc(1);
    };
    let progress = Progress {
        stage: &mut stage,
        tensor: &mut tensor,
    };
    let writer = quantize_with(
        &args.input,
        &source,
        method,
        &opts,
        calib.as_ref(),
        progress,
    )?;
    bar.finish_and_clear();
    let quantized_s = start.elapsed().as_secs_f64();
    write_file(&writer, &args.output)?;
    let size = std::fs::metadata(&args.output)
        .map(|m| m.len())
        .unwrap_or(0);
    for (ty, (tensors, elements)) in &by_type {
        eprintln!("  {ty:>5}: {tensors} tensors, {elements} weights");
    }
    eprintln!(
        "wrote {} ({:.1} MiB) in {:.2} s (quantize {:.2} s)",
        args.output.display(),
        size as f64 / (1 << 20) as f64,
        start.elapsed().as_secs_f64(),
        quantized_s
    );
    Ok(())
}
