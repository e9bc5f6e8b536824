//! `kestrel convert`: GGUF → HF safetensors directory, or HF directory → GGUF, optionally with
//! a LoRA adapter merged into the weights (`--merge-lora`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use kestrel_quant::convert::{gguf_to_hf_merged, hf_to_gguf_merged, FloatType};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Target {
    Safetensors,
    Gguf,
}

#[derive(clap::Args)]
pub struct ConvertArgs {
    /// A .gguf file (for --to safetensors) or an HF checkpoint directory (for --to gguf).
    pub input: PathBuf,
    /// Output directory (safetensors) or .gguf file.
    pub output: PathBuf,
    #[arg(long, value_enum)]
    pub to: Target,
    /// Storage type of the converted tensors: f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Fold a LoRA adapter (PEFT directory or llama.cpp LoRA GGUF) into the weights it
    /// changes: W + scale · B · A.
    #[arg(long)]
    pub merge_lora: Option<PathBuf>,
}

pub fn run(args: ConvertArgs) -> Result<()> {
    let dtype: FloatType = args.dtype.parse()?;
    let start = Instant::now();
    let bar = indicatif::ProgressBar::new_spinner();
    let mut n = 0usize;
    match args.to {
        Target::Safetensors => {
            if args.input.is_dir() {
                bail!(
                    "--to safetensors needs a .gguf input, got directory {}",
                    args.input.display()
                );
            }
            let lora = args.merge_lora.as_deref();
            gguf_to_hf_merged(&args.input, &args.output, dtype, lora, &mut |p| {
                n += 1;
                bar.set_message(format!("{} ({} -> {})", p.name, p.from, p.to));
                bar.tick();
            })?;
        }
        Target::Gguf => {
            if !args.input.is_dir() {
                bail!(
                    "--to gguf needs an HF checkpoint directory, got {}",
                    args.input.display()
                );
            }
            bar.set_message("converting tensors");
            n = hf_to_gguf_merged(&args.input, &args.output, dtype, args.merge_lora.as_deref())?
                .len();
        }
    }
    bar.finish_and_clear();
    eprintln!(
        "converted {n} tensors to {} in {:.2} s",
        args.output.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
