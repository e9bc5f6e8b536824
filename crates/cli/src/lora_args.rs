//! [`LoraArgs`]: the LoRA flags of `kestrel serve` and `kestrel worker` (vLLM's names).
//! `--enable-runtime-lora` mounts HTTP routes, so it is `serve`'s alone.

use std::path::PathBuf;

use kestrel_engine::adapters::LoraLimits;
use kestrel_server::launch::LaunchOptions;

#[derive(clap::Args)]
pub struct LoraArgs {
    /// LoRA adapters to serve, as name=path (a PEFT directory or a llama.cpp LoRA adapter
    /// .gguf); requests pick one by name (`model` on OpenAI routes, `parameters.adapter_id` on
    /// TGI routes).
    #[arg(long, num_args = 1.., value_parser = parse_module)]
    pub lora_modules: Vec<(String, PathBuf)>,
    /// Most distinct adapters in one engine step (requests of another adapter wait).
    #[arg(long, default_value_t = LoraLimits::default().max_loras)]
    pub max_loras: usize,
    /// Largest adapter rank accepted.
    #[arg(long, default_value_t = LoraLimits::default().max_lora_rank)]
    pub max_lora_rank: usize,
    /// Most adapters kept in memory; loading one more evicts the least recently used adapter
    /// that no running or waiting request uses [default: --max-loras].
    #[arg(long)]
    pub max_cpu_loras: Option<usize>,
}

impl LoraArgs {
    /// Adds the adapters and limits to `opts`.
    pub fn apply(&self, opts: &mut LaunchOptions) {
        opts.lora_modules = self.lora_modules.clone();
        opts.lora_limits = LoraLimits {
            max_loras: self.max_loras,
            max_lora_rank: self.max_lora_rank,
            max_cpu_loras: self.max_cpu_loras.unwrap_or(self.max_loras),
        };
    }
}

/// `name=path`.
fn parse_module(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("expected name=path, got {s:?}")),
    }
}
