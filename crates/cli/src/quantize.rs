//! `kestrel quantize`: a GGUF file or HF directory → a GGUF file of one block type
//! (q8_0, q4_0, q4_1, q4_k, q6_k), with a progress bar and per-type totals.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use kestrel_model::convert::{write_file, ModelSource};
use kestrel_model::quantize::{quantize_model, QuantMethod};

#[derive(clap::Args)]
pub struct QuantizeArgs {
    /// A .gguf file or an HF checkpoint directory.
    pub input: PathBuf,
    /// The .gguf file to write.
    pub output: PathBuf,
    /// q8_0, q4_0, q4_1, q4_k or q6_k.
    #[arg(long)]
    pub method: String,
}

pub fn run(args: QuantizeArgs) -> Result<()> {
    let method: QuantMethod = args.method.parse()?;
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
    let writer = quantize_model(&source, method, &mut |p| {
        let e = by_type.entry(p.to.name().to_string()).or_default();
        e.0 += 1;
        e.1 += p.shape.iter().product::<usize>();
        bar.set_message(format!("{} {} -> {}", p.name, p.from, p.to));
        bar.inc(1);
    })?;
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
