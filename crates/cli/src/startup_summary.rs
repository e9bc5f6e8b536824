//! The startup summary `kestrel serve` logs once it listens (INFO, target `kestrel::startup`):
//! what it chose and why: threads, the kernels' ISA, the KV cache, the batching limits, the
//! model, and the URLs.
//!
//! ```text
//! threads: 16 (16 cores detected)
//! ISA: avx512-vnni (the best this CPU supports)
//! KV cache: 29127 tokens, 1.0 GiB (f32, 1820 blocks of 16, 36.0 KiB per token; sized by --kv-cache-memory 1GiB, the default)
//! batching: up to 64 sequences, 512 batched tokens per step, 8192 tokens per sequence (prompt up to 8191)
//! model: SmolLM2.gguf (llama, 134.5 M parameters, mostly Q4_1 weights), served as SmolLM2
//! playground: http://127.0.0.1:8000/   API base: http://127.0.0.1:8000/v1
//! ```

use std::path::{Path, PathBuf};

use kestrel_kernels::cpu::dispatch::Isa;
use kestrel_model::weights::gguf::GgufFile;
use kestrel_model::weights::safetensors::SafetensorsCheckpoint;
use kestrel_model::weights::TensorSource;
use kestrel_server::launch::{KvBudget, KvCacheSize, LaunchOptions};

/// What the summary says about the model, read while it loads.
#[derive(Debug, Clone)]
pub struct ModelDescription {
    pub path: PathBuf,
    pub architecture: &'static str,
    /// Weights in the file (0 if its tensors could not be listed).
    pub parameters: u64,
    /// The storage type of most weights (`Q4_1`, `BF16`, ...), or the `--quantize` method.
    pub weight_type: String,
}

impl ModelDescription {
    /// Describes the model at `path` (loaded as `loaded`), quantized to `quantize` if given.
    pub fn new(
        path: &Path,
        loaded: &kestrel_model::LoadedModel,
        quantize: Option<&str>,
    ) -> ModelDescription {
        let totals = tensor_totals(path);
        let parameters = totals.iter().map(|(_, n)| n).sum();
        let most = totals
            .iter()
            .max_by_key(|(_, n)| *n)
            .map_or_else(|| "unknown".to_string(), |(t, _)| t.to_string());
        ModelDescription {
            path: path.to_path_buf(),
            architecture: loaded.config.architecture.name(),
            parameters,
            weight_type: quantize.map_or(most, |q| format!("{q} (quantized while loading)")),
        }
    }
}

/// Weights per storage type in the file or checkpoint at `path` (empty if it cannot be read).
fn tensor_totals(path: &Path) -> Vec<(&'static str, u64)> {
    let source: Box<dyn TensorSource> = if path.is_dir() {
        match SafetensorsCheckpoint::open(path) {
            Ok(c) => Box::new(c),
            Err(_) => return Vec::new(),
        }
    } else {
        match GgufFile::open(path) {
            Ok(f) => Box::new(f),
            Err(_) => return Vec::new(),
        }
    };
    let mut totals: Vec<(&'static str, u64)> = Vec::new();
    for name in source.tensor_names() {
        let Some(t) = source.tensor(&name) else {
            continue;
        };
        let n = t.n_elements() as u64;
        match totals.iter_mut().find(|(ty, _)| *ty == t.dtype.name()) {
            Some((_, total)) => *total += n,
            None => totals.push((t.dtype.name(), n)),
        }
    }
    totals
}

/// Everything the summary reports.
pub struct Summary<'a> {
    pub threads: Option<usize>,
    pub pool_threads: usize,
    pub opts: &'a LaunchOptions,
    pub kv: KvCacheSize,
    pub limits: &'a kestrel_server::Limits,
    pub model: &'a ModelDescription,
    pub served_as: &'a str,
    pub addr: std::net::SocketAddr,
}

impl Summary<'_> {
    /// The summary's lines.
    pub fn lines(&self) -> Vec<String> {
        let base = format!("http://{}", self.addr);
        vec![
            format!("threads: {} ({})", self.pool_threads, self.threads_reason()),
            format!("ISA: {}", isa_line()),
            format!("KV cache: {}", self.kv_line()),
            format!(
                "batching: up to {} sequences, {} batched tokens per step, {} tokens per sequence (prompt up to {})",
                self.opts.max_num_seqs,
                self.opts.max_num_batched_tokens,
                self.limits.max_total_tokens,
                self.limits.max_input_tokens
            ),
            format!(
                "model: {} ({}, {}, mostly {} weights), served as {}",
                self.model.path.display(),
                self.model.architecture,
                parameters(self.model.parameters),
                self.model.weight_type,
                self.served_as
            ),
            format!("playground: {base}/   API base: {base}/v1"),
        ]
    }

    /// Logs the lines at INFO.
    pub fn log(&self) {
        for line in self.lines() {
            tracing::info!(target: "kestrel::startup", "{line}");
        }
    }

    fn threads_reason(&self) -> String {
        if self.threads.is_some() {
            return "--threads".into();
        }
        if let Some(v) = std::env::var("KESTREL_THREADS")
            .ok()
            .filter(|v| v.parse::<usize>().is_ok())
        {
            return format!("KESTREL_THREADS={v}");
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!("{cores} cores detected")
    }

    fn kv_line(&self) -> String {
        let kv = &self.kv;
        let how = match self.opts.kv_cache {
            KvBudget::Tokens(t) => format!("--kv-cache-tokens {t}"),
            KvBudget::Bytes(b) if b == DEFAULT_KV_BYTES => {
                "--kv-cache-memory 1GiB, the default".into()
            }
            KvBudget::Bytes(b) => format!("--kv-cache-memory {}", size(b as usize)),
        };
        format!(
            "{} tokens, {} ({}, {} blocks of {}, {:.1} KiB per token; sized by {how})",
            kv.tokens(),
            size(kv.bytes()),
            kv.dtype,
            kv.num_blocks,
            kv.block_size,
            kv.bytes_per_token as f64 / 1024.0
        )
    }
}

/// `--kv-cache-memory`'s default.
const DEFAULT_KV_BYTES: u64 = 1 << 30;

/// The ISA the kernels dispatch to, and why.
fn isa_line() -> String {
    let (chosen, best) = (Isa::detected(), Isa::supported());
    let tiles = if Isa::tiles() {
        " with AMX tiles for batched products"
    } else {
        ""
    };
    let capped = chosen != best || Isa::tiles_supported() && !Isa::tiles();
    match std::env::var("KESTREL_ISA") {
        Ok(cap) if capped => format!(
            "{}{tiles} (KESTREL_ISA={cap}; the CPU supports {}{})",
            chosen.name(),
            best.name(),
            if Isa::tiles_supported() {
                " and AMX"
            } else {
                ""
            }
        ),
        _ => format!("{}{tiles} (the best this CPU supports)", chosen.name()),
    }
}

fn parameters(n: u64) -> String {
    if n == 0 {
        "unknown parameters".into()
    } else if n >= 1_000_000_000 {
        format!("{:.2} B parameters", n as f64 / 1e9)
    } else {
        format!("{:.1} M parameters", n as f64 / 1e6)
    }
}

/// Bytes in binary units.
fn size(bytes: usize) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1 << 20) as f64 {
        format!("{:.1} MiB", b / (1 << 20) as f64)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_read_naturally() {
        assert_eq!(size(1 << 30), "1.00 GiB");
        assert_eq!(size(3 << 19), "1.5 MiB");
        assert_eq!(parameters(134_515_008), "134.5 M parameters");
        assert_eq!(parameters(7_241_732_096), "7.24 B parameters");
        assert_eq!(parameters(0), "unknown parameters");
    }
}
