//! [`EngineArgs`]: the flags that load a model and start an engine, shared by `kestrel serve`
//! and `kestrel worker`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kestrel_engine::speculative::SpeculativeConfig;
use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_model::engine_builder::{KvDiskOptions, SpecMethod, SpeculativeOptions};
use kestrel_quant::quantize::{QuantMethod, QuantOptions};
use kestrel_server::generation_defaults::GenerationDefaults;
use kestrel_server::launch::{KvBudget, LaunchOptions, Launched};

use crate::startup_summary::ModelDescription;

#[derive(clap::Args, Clone)]
pub struct EngineArgs {
    /// A .gguf file or an HF checkpoint directory [default: SmolLM2-135M-Instruct, fetched on
    /// first use]. `kestrel serve` takes it repeated as NAME=PATH to serve several models,
    /// each under its NAME.
    #[arg(long, env = "MODEL_ID", action = clap::ArgAction::Append)]
    pub model: Vec<PathBuf>,
    /// Name clients see in /v1/models and responses [default: the model file's stem].
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// The chat template used instead of the model's own (or given to a model whose file has
    /// none and whose family has no built-in one): a Jinja file, or the name of a built-in
    /// template (`chatml`, `gemma`).
    #[arg(long, value_name = "PATH_OR_NAME")]
    pub chat_template: Option<PathBuf>,
    /// Most requests running in one batch.
    #[arg(long, env = "MAX_BATCH_SIZE", default_value_t = 64)]
    pub max_num_seqs: usize,
    /// Longest prompt in tokens [default: max total tokens - 1].
    #[arg(long, env = "MAX_INPUT_LENGTH")]
    pub max_input_tokens: Option<usize>,
    /// Longest prompt + output in tokens [default: the model's context, capped by the KV cache
    /// unless a sliding window on every layer bounds each sequence's blocks].
    #[arg(long, env = "MAX_TOTAL_TOKENS")]
    pub max_total_tokens: Option<usize>,
    /// Token budget of one engine step (chunked prefill).
    #[arg(long, env = "MAX_BATCH_PREFILL_TOKENS", default_value_t = 512)]
    pub max_num_batched_tokens: usize,
    /// KV cache memory, e.g. 512MiB, 2GiB, 1000000.
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes)]
    pub kv_cache_memory: u64,
    /// KV cache size in tokens (instead of --kv-cache-memory).
    #[arg(long)]
    pub kv_cache_tokens: Option<usize>,
    /// KV cache storage: f16 (half of f32's memory and bandwidth, as llama.cpp's default), f32
    /// (exact) or q8 (int8 with one scale per head row).
    #[arg(long, default_value_t = KvDtype::F16)]
    pub kv_cache_dtype: KvDtype,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// Sampling values for requests that leave them out, as a JSON object (vLLM's flag):
    /// `{"temperature": 0}` makes the model greedy; keys temperature, top_p, top_k, min_p,
    /// repetition_penalty and max_new_tokens (the output limit of requests that set none).
    #[arg(long, value_name = "JSON", value_parser = parse_generation_defaults)]
    pub override_generation_config: Option<GenerationDefaults>,
    /// A directory for the KV disk tier: full prefix-cache blocks are kept there (and read
    /// back for later prompts that start the same way), across restarts.
    #[arg(long, value_name = "DIR")]
    pub kv_cache_disk: Option<PathBuf>,
    /// Most bytes the KV disk tier's files may take (least recently used blocks go first).
    #[arg(long, default_value = "20GiB", value_parser = parse_bytes, requires = "kv_cache_disk")]
    pub kv_cache_disk_size: u64,
    /// Quantize an F32/F16/BF16 model while loading: int8, int4, nf4, q8_0, q4_0, q4_1, q4_k
    /// or q6_k (round to nearest; awq and gptq need calibration: use `kestrel quantize`).
    #[arg(long)]
    pub quantize: Option<String>,
    /// Columns per group for --quantize int4.
    #[arg(long, default_value_t = 128)]
    pub quantize_group: usize,
    /// Disable sharing KV blocks between requests with equal prefixes.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Worker threads [default: KESTREL_THREADS, else all cores].
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// How the model writes tool calls, for `tool_choice: "auto"`: hermes (Hermes, Qwen2.5,
    /// Qwen3), llama3_json, mistral or harmony (gpt-oss) [default: what the chat template
    /// shows].
    #[arg(long, value_parser = parse_tool_parser)]
    pub tool_call_parser: Option<kestrel_server::tools::ToolCallFormat>,
    /// How the model marks its reasoning, split from the answer into `reasoning_content`
    /// (chat), `thinking` blocks (Messages) and `reasoning` items (Responses): deepseek_r1,
    /// qwen3, harmony (gpt-oss), or none to turn splitting off [default: what the chat
    /// template shows].
    #[arg(long, value_parser = parse_reasoning_parser)]
    pub reasoning_parser: Option<ReasoningParserFlag>,
    /// Admit every request even when its `ttft_slo_ms` (or X-TTFT-SLO-Ms header) is
    /// predicted to be missed; objectives are then only counted in
    /// kestrel:requests_slo_{met,missed}_total. By default such requests get 429 at once.
    #[arg(long)]
    pub no_slo_admission: bool,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
}

/// Speculative decoding flags.
#[derive(clap::Args, Debug, Clone)]
pub struct SpeculativeArgs {
    /// Speculative decoding: `ngram` (prompt lookup, no second model) or `draft` (a smaller
    /// model with the same tokenizer, --draft-model). Off when not given.
    #[arg(long, value_parser = parse_spec_method)]
    pub speculative_method: Option<SpecMethod>,
    /// The draft model for --speculative-method draft: a .gguf file or an HF checkpoint
    /// directory with the target's tokenizer.
    #[arg(long)]
    pub draft_model: Option<PathBuf>,
    /// Draft tokens proposed per request and step.
    #[arg(long, default_value_t = 4)]
    pub num_speculative_tokens: usize,
    /// Shortest suffix n-gram the ngram method looks up.
    #[arg(long, default_value_t = 2)]
    pub prompt_lookup_min: usize,
    /// Longest suffix n-gram the ngram method looks up.
    #[arg(long, default_value_t = 4)]
    pub prompt_lookup_max: usize,
    /// Speculation pauses for a step when running requests × (K + 1) exceed this many tokens
    /// (the batch is compute-bound).
    #[arg(long, default_value_t = SpeculativeConfig::DEFAULT_MAX_BATCH_TOKENS)]
    pub speculative_max_batch_tokens: usize,
    /// Always verify up to --num-speculative-tokens drafts. By default each request's draft
    /// length follows its acceptance: one more than the accepted part after a rejection, one
    /// longer after each fully accepted draft.
    #[arg(long)]
    pub speculative_fixed_length: bool,
}

fn parse_spec_method(s: &str) -> Result<SpecMethod, String> {
    s.parse()
}

impl SpeculativeArgs {
    /// The options, or `None` without --speculative-method; errors name the flag at fault.
    pub fn options(&self) -> Result<Option<SpeculativeOptions>> {
        let Some(method) = self.speculative_method else {
            if self.draft_model.is_some() {
                bail!("--draft-model needs --speculative-method draft");
            }
            return Ok(None);
        };
        let opts = SpeculativeOptions {
            method,
            draft_model: self.draft_model.clone(),
            num_speculative_tokens: self.num_speculative_tokens,
            prompt_lookup_min: self.prompt_lookup_min,
            prompt_lookup_max: self.prompt_lookup_max,
            max_batch_tokens: self.speculative_max_batch_tokens,
            adaptive_length: !self.speculative_fixed_length,
        };
        opts.validate()?;
        Ok(Some(opts))
    }

    /// Loads the draft model when the method needs one.
    pub fn load_draft(&self) -> Result<Option<kestrel_model::LoadedModel>> {
        match (&self.speculative_method, &self.draft_model) {
            (Some(SpecMethod::Draft), Some(path)) => Ok(Some(crate::load_with_progress(path)?)),
            _ => Ok(None),
        }
    }
}

impl EngineArgs {
    pub fn launch_options(&self) -> Result<LaunchOptions> {
        Ok(LaunchOptions {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            block_size: self.block_size,
            kv_cache: match self.kv_cache_tokens {
                Some(t) => KvBudget::Tokens(t),
                None => KvBudget::Bytes(self.kv_cache_memory),
            },
            kv_dtype: self.kv_cache_dtype,
            enable_prefix_caching: !self.no_prefix_caching,
            max_input_tokens: self.max_input_tokens,
            max_total_tokens: self.max_total_tokens,
            model_id: self.served_model_name.clone(),
            speculative: self.speculative.options()?,
            tool_call_parser: self.tool_call_parser,
            reasoning_parser: self.reasoning_parser.map(|f| f.0),
            slo_admission: !self.no_slo_admission,
            kv_disk: self.kv_disk()?,
            generation_defaults: self.override_generation_config.unwrap_or_default(),
            ..LaunchOptions::default()
        })
    }

    /// The KV disk tier asked for, checked against the prefix-cache setting.
    fn kv_disk(&self) -> Result<Option<KvDiskOptions>> {
        let Some(dir) = self.kv_cache_disk.clone() else {
            return Ok(None);
        };
        if self.no_prefix_caching {
            bail!("--kv-cache-disk keeps prefix-cache blocks: it needs prefix caching (drop --no-prefix-caching)");
        }
        Ok(Some(KvDiskOptions {
            dir,
            budget_bytes: self.kv_cache_disk_size,
        }))
    }

    /// The one model asked for (`None`: the default model); several are refused.
    pub fn single_model(&self) -> Result<Option<PathBuf>> {
        match self.model.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one.clone())),
            _ => bail!("--model is given {} times; only `kestrel serve` serves several models (as --model NAME=PATH)", self.model.len()),
        }
    }

    /// [`EngineArgs::launch`] with options the caller completed (e.g. LoRA adapters), and a
    /// description of the model for the startup summary.
    pub fn launch_with(&self, opts: &LaunchOptions) -> Result<(Launched, ModelDescription)> {
        let path = crate::resolve_model(self.single_model()?)?;
        self.launch_model(&path, opts, crate::thread_pool(self.threads))
    }

    /// Loads the model at `path` with these flags (quantizing it, setting its chat template
    /// and draft model if asked) and starts its engine on `pool`.
    pub fn launch_model(
        &self,
        path: &std::path::Path,
        opts: &LaunchOptions,
        pool: &'static kestrel_kernels::cpu::threadpool::ThreadPool,
    ) -> Result<(Launched, ModelDescription)> {
        let path = path.to_path_buf();
        let mut loaded = match &self.quantize {
            None => crate::load_with_progress(&path)?,
            Some(method) => load_quantizing(&path, method, self.quantize_group)?,
        };
        if let Some(template) = &self.chat_template {
            loaded
                .set_chat_template(chat_template_source(template)?)
                .with_context(|| format!("chat template {}", template.display()))?;
        }
        let description = ModelDescription::new(&path, &loaded, self.quantize.as_deref());
        let draft = self.speculative.load_draft()?;
        let launched = kestrel_server::launch::start_engine_with_draft(loaded, draft, opts, pool)?;
        Ok((launched, description))
    }
}

/// The template `--chat-template` names: a file's text, or a built-in template's.
fn chat_template_source(template: &std::path::Path) -> Result<String> {
    let builtin = template
        .to_str()
        .and_then(kestrel_model::families::builtin_templates::named);
    match builtin {
        Some(source) if !template.exists() => Ok(source.to_string()),
        _ => std::fs::read_to_string(template).with_context(|| {
            format!(
                "cannot read chat template {} (a file, or a built-in name: {})",
                template.display(),
                kestrel_model::families::builtin_templates::names()
            )
        }),
    }
}

/// Parses `--override-generation-config`.
fn parse_generation_defaults(s: &str) -> Result<GenerationDefaults, String> {
    GenerationDefaults::parse(s)
}

/// Parses `512MiB`, `2GiB`, `1.5GB`, `4096` (bytes) and the like.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a size: {s:?}"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {s:?} (use B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(format!("size must be at least 1 byte, got {s:?}"));
    }
    Ok(bytes as u64)
}

/// Load `path`, quantizing its matrices with `method`, with a progress bar over the tensors.
fn load_quantizing(
    path: &std::path::Path,
    method: &str,
    group: usize,
) -> Result<kestrel_model::LoadedModel> {
    let method: QuantMethod = method.parse()?;
    let opts = QuantOptions {
        group,
        ..QuantOptions::default()
    };
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} quantizing to {prefix} [{elapsed_precise}] {pos} tensors {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_prefix(method.name());
    bar.enable_steady_tick(Duration::from_millis(120));
    let start = std::time::Instant::now();
    let on_tensor = |name: &str, from: kestrel_kernels::DType, to: kestrel_kernels::DType| {
        bar.set_message(format!("{name} {from} -> {to}"));
        bar.inc(1);
    };
    let load = kestrel_quant::LoadOptions {
        quantize: Some((method, opts)),
        on_tensor: Some(&on_tensor),
    };
    let loaded = kestrel_quant::load_model_with(path, &load);
    bar.finish_and_clear();
    let loaded = loaded.map_err(|e| anyhow::anyhow!("cannot load {}: {e}", path.display()))?;
    eprintln!(
        "quantized {} to {} while loading in {:.1} s ({} tensors, {:.1} MiB of weights)",
        path.display(),
        method.name(),
        start.elapsed().as_secs_f64(),
        bar.position(),
        loaded.model.weight_bytes() as f64 / (1 << 20) as f64
    );
    Ok(loaded)
}

/// A `--reasoning-parser` value: a parser, or none (`none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasoningParserFlag(pub Option<kestrel_server::reasoning::ReasoningParser>);

fn parse_reasoning_parser(name: &str) -> Result<ReasoningParserFlag, String> {
    kestrel_server::reasoning::ReasoningParser::from_name(name)
        .map(ReasoningParserFlag)
        .map_err(|e| e.to_string())
}

fn parse_tool_parser(name: &str) -> Result<kestrel_server::tools::ToolCallFormat, String> {
    kestrel_server::tools::ToolCallFormat::from_name(name).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("0").is_err());
    }
}
