//! `kestrel convert`: GGUF → HF safetensors directory, or HF directory → GGUF.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use kestrel_quant::convert::{gguf_to_hf, hf_to_gguf, FloatType};

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
            gguf_to_hf(&args.input, &args.output, dtype, &mut |p| {
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
            n = hf_to_gguf(&args.input, &args.output, dtype)?.len();
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
