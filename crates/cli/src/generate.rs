//! `kestrel generate`: stream a completion of a prompt (or a chat turn) to stdout, through the
//! same engine as `kestrel serve` (so stop strings, penalties and detokenization exist once).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::api::{EngineEvent, EngineRequest};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::handle::{EngineHandle, ResponseStream};
use kestrel_engine::sampling::SamplingParams;
use kestrel_model::chat_template::ChatMessage;
use kestrel_model::engine_builder::{EngineBuildError, EngineBuilder};
use kestrel_model::runner::{KvBudget, KvSpec};
use kestrel_model::{KvDtype, LoadedModel};

use crate::engine_args::SpeculativeArgs;

const BLOCK_SIZE: usize = 16;

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// A .gguf file or an HF checkpoint directory [default: SmolLM2-135M-Instruct, fetched on first use].
    #[arg(long, env = "MODEL_ID")]
    pub model: Option<PathBuf>,
    /// The prompt; with --chat, the user's message.
    pub prompt: String,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    pub chat: bool,
    /// System message (with --chat).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, short = 'n', default_value_t = 128)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long)]
    pub top_k: Option<usize>,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Seed for reproducible sampling.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// KV cache storage: f16 (half of f32's memory and bandwidth, the server's default), f32
    /// (exact) or q8 (int8 with one scale per head row).
    #[arg(long, default_value_t = KvDtype::F16)]
    pub kv_cache_dtype: KvDtype,
    /// Worker threads [default: KESTREL_THREADS, else all cores].
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Generate with a LoRA adapter: a PEFT directory (adapter_config.json +
    /// adapter_model.safetensors) or a llama.cpp LoRA GGUF.
    #[arg(long)]
    pub lora: Option<PathBuf>,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
}

impl GenerateArgs {
    fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            ..SamplingParams::default()
        }
    }
}

/// Runs the prompt through the same engine `kestrel serve` uses (one request, a KV cache sized
/// for it, the whole prompt in one step), streaming its text to stdout.
pub fn run(args: GenerateArgs) -> Result<()> {
    let path = crate::resolve_model(args.model.clone())?;
    let loaded = crate::load_with_progress(&path)?;
    let prompt = prompt_ids(&loaded, &args)?;
    let (engine, adapter) = start_engine(loaded, &args, prompt.len())?;
    let request = EngineRequest::new(prompt, args.sampling(), &engine.limits())
        .map_err(|e| anyhow!("invalid request ({}): {e}", e.param()))?
        .with_adapter(adapter);
    let result = stream_to_stdout(engine.submit(request)?);
    engine.shutdown(Duration::ZERO);
    result?.print();
    Ok(())
}

/// An engine over `loaded` for one request of `prompt_len` tokens plus `--max-tokens`, and the
/// id of the `--lora` adapter the engine loaded (as `kestrel serve` loads `--lora-modules`).
fn start_engine(
    loaded: LoadedModel,
    args: &GenerateArgs,
    prompt_len: usize,
) -> Result<(EngineHandle, Option<AdapterId>)> {
    let tokens = prompt_len + args.max_tokens;
    let budget = KvBudget::Tokens(tokens.div_ceil(BLOCK_SIZE).max(1) * BLOCK_SIZE);
    let kv = KvSpec::for_budget(&loaded.model, BLOCK_SIZE, args.kv_cache_dtype, budget)?;
    let config = EngineConfig {
        max_num_seqs: 1,
        max_num_batched_tokens: prompt_len.max(args.speculative.num_speculative_tokens + 1),
        enable_prefix_caching: false,
        max_model_len: loaded.config.max_position_embeddings,
        max_concurrent_requests: None,
        lora: kestrel_engine::adapters::LoraLimits::unlimited(),
    };
    let pool = crate::thread_pool(args.threads);
    let speculative = args.speculative.options()?;
    let draft = match speculative {
        None => None,
        Some(_) => args.speculative.load_draft()?,
    };
    let lora = args
        .lora
        .iter()
        .map(|path| (crate::lora_name(path), path.clone()))
        .collect();
    let built = EngineBuilder::new(loaded, kv, config, pool)
        .speculative(speculative, draft)
        .lora_modules(lora)
        .build()
        .map_err(|e| match e {
            EngineBuildError::Lora { path, source, .. } => {
                anyhow!("cannot load LoRA adapter {}: {source}", path.display())
            }
            EngineBuildError::Start(e) => e.into(),
            e => e.into(),
        })?;
    let adapter = built.adapters.first().map(|card| {
        eprintln!(
            "LoRA adapter {} loaded from {}",
            card.name,
            card.path.display()
        );
        card.id
    });
    Ok((built.engine, adapter))
}

/// Prints the request's text as it arrives; returns its token counts and timings.
fn stream_to_stdout(mut stream: ResponseStream) -> Result<Stats> {
    let mut out = std::io::stdout().lock();
    while let Some(event) = stream.blocking_next() {
        match event {
            EngineEvent::Token(t) => {
                out.write_all(t.text.as_bytes())?;
                out.flush()?;
            }
            EngineEvent::Finished {
                text,
                usage,
                timings,
                ..
            } => {
                writeln!(out, "{text}")?;
                return Ok(Stats {
                    prompt_tokens: usage.prompt_tokens,
                    prompt_time: timings.time_to_first_token,
                    gen_tokens: usage.completion_tokens,
                    gen_time: timings
                        .end_to_end
                        .saturating_sub(timings.time_to_first_token),
                });
            }
            EngineEvent::Failed(f) => bail!("generation failed: {f}"),
        }
    }
    bail!("the engine ended the request without a result")
}

fn prompt_ids(loaded: &LoadedModel, args: &GenerateArgs) -> Result<Vec<u32>> {
    let ids = if args.chat {
        let template = loaded
            .chat_template
            .as_ref()
            .context("this model has no chat template; drop --chat")?;
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(ChatMessage::new("system", system.clone()));
        }
        messages.push(ChatMessage::new("user", args.prompt.clone()));
        let text = template.render(&messages, true)?;
        loaded.tokenizer.encode(&text, false)?
    } else {
        loaded.tokenizer.encode(&args.prompt, true)?
    };
    if ids.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    Ok(ids)
}

struct Stats {
    prompt_tokens: usize,
    prompt_time: Duration,
    gen_tokens: usize,
    gen_time: Duration,
}

impl Stats {
    fn print(&self) {
        let rate = |n: usize, t: Duration| n as f64 / t.as_secs_f64().max(1e-9);
        eprintln!(
            "prompt: {} tokens in {:.1} ms ({:.1} tokens/s); generation: {} tokens in {:.1} ms ({:.1} tokens/s)",
            self.prompt_tokens,
            self.prompt_time.as_secs_f64() * 1e3,
            rate(self.prompt_tokens, self.prompt_time),
            self.gen_tokens,
            self.gen_time.as_secs_f64() * 1e3,
            // The first token comes from the prompt pass; decode steps produce the rest.
            rate(self.gen_tokens.saturating_sub(1), self.gen_time),
        );
    }
}
