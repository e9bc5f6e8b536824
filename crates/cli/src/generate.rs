//! `kestrel generate`: stream a completion of a prompt (or a chat turn) to stdout.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kestrel_engine::executor::{BatchInput, Executor, SeqBatch};
use kestrel_engine::output::TextStream;
use kestrel_engine::sampling::{Sampler, SamplingParams, TokenHistory};
use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_model::chat_template::ChatMessage;
use kestrel_model::runner::KvSpec;
use kestrel_model::{LoadedModel, ModelRunner};

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
    /// KV cache storage: f32, f16 (half the memory) or q8 (int8 with one scale per head row).
    #[arg(long, default_value_t = KvDtype::F32)]
    pub kv_cache_dtype: KvDtype,
    /// Worker threads [default: KESTREL_THREADS, else all cores].
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
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

pub fn run(args: GenerateArgs) -> Result<()> {
    let sampler = Sampler::new(args.sampling()).context("invalid sampling parameters")?;
    let path = crate::resolve_model(args.model.clone())?;
    let loaded = crate::load_with_progress(&path)?;
    let prompt = prompt_ids(&loaded, &args)?;
    let limit = loaded.config.max_position_embeddings;
    if prompt.len() + args.max_tokens > limit {
        bail!(
            "prompt ({} tokens) + max tokens ({}) exceeds the model's context length ({limit})",
            prompt.len(),
            args.max_tokens
        );
    }
    let pool = crate::thread_pool(args.threads);
    let blocks = (prompt.len() + args.max_tokens).div_ceil(BLOCK_SIZE).max(1);
    let kv = KvSpec {
        block_size: BLOCK_SIZE,
        num_blocks: blocks,
        dtype: args.kv_cache_dtype,
    };
    let mut runner = ModelRunner::with_kv(loaded.model, kv, pool);
    let mut session = Session {
        tokenizer: &loaded.tokenizer,
        sampler,
        eos: loaded.tokenizer.eos_ids().to_vec(),
    };
    let stats = session.generate(&mut runner, &prompt, &args.stop, blocks)?;
    stats.print();
    Ok(())
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

struct Session<'a> {
    tokenizer: &'a kestrel_model::tokenizer::Tokenizer,
    sampler: Sampler,
    eos: Vec<u32>,
}

struct Stats {
    prompt_tokens: usize,
    prompt_time: Duration,
    gen_tokens: usize,
    gen_time: Duration,
}

impl Session<'_> {
    /// Prefill `prompt`, then decode until a stop condition, streaming text to stdout.
    fn generate(
        &mut self,
        runner: &mut ModelRunner,
        prompt: &[u32],
        stops: &[String],
        blocks: usize,
    ) -> Result<Stats> {
        let block_table: Vec<u32> = (0..blocks as u32).collect();
        let mut tokens = prompt.to_vec();
        let mut stream = TextStream::new(prompt, stops.iter().cloned());
        let mut out = std::io::stdout().lock();
        let start = Instant::now();
        let mut step = SeqBatch {
            tokens: prompt.to_vec(),
            start_pos: 0,
            block_table,
            need_logits: true,
        };
        let mut prompt_time = None;
        let params = self.sampler.params().clone();
        while tokens.len() - prompt.len() < params.max_tokens {
            let batch = BatchInput {
                seqs: vec![step.clone()],
            };
            let mut logits = runner.execute(&batch)?.logits;
            prompt_time.get_or_insert_with(|| start.elapsed());
            let next = self
                .sampler
                .sample(&mut logits, TokenHistory::new(&tokens, prompt.len()))?;
            tokens.push(next);
            if !params.ignore_eos && params.is_stop_token(next, &self.eos) {
                break;
            }
            let piece = stream.push(self.tokenizer, next);
            out.write_all(piece.text.as_bytes())?;
            out.flush()?;
            if piece.stopped.is_some() {
                break;
            }
            step.start_pos = tokens.len() - 1;
            step.tokens.clear();
            step.tokens.push(next);
        }
        let tail = stream.finish(self.tokenizer);
        writeln!(out, "{}", tail.text)?;
        let prompt_time = prompt_time.unwrap_or_default();
        Ok(Stats {
            prompt_tokens: prompt.len(),
            prompt_time,
            gen_tokens: tokens.len() - prompt.len(),
            gen_time: start.elapsed() - prompt_time,
        })
    }
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
