//! `kestrel ppl`: perplexity of a model on a text file, computed like llama.cpp's
//! `llama-perplexity` (non-overlapping windows, second half of each scored), plus optional
//! saving of the base model's log-probs and KL divergence against saved ones.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_model::runner::KvSpec;
use kestrel_model::ModelRunner;
use kestrel_quant::perplexity::{
    self, KlStats, LogProbHeader, LogProbReader, LogProbWriter, NllStats, RunnerModel, ScoredToken,
};

const BLOCK_SIZE: usize = 16;

#[derive(clap::Args)]
pub struct PplArgs {
    /// A .gguf file or an HF checkpoint directory.
    pub model: PathBuf,
    /// The text to score (e.g. wiki.utf8 from scripts/fetch_wiki_text.sh).
    #[arg(long)]
    pub text: PathBuf,
    /// Tokens per window; the second half of each window is scored.
    #[arg(long, default_value_t = 512)]
    pub ctx: usize,
    /// Tokens per forward pass within a window [default: ctx].
    #[arg(long)]
    pub batch: Option<usize>,
    /// Score at most this many windows.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// KV cache storage: f32, f16 (half the memory) or q8 (int8 with one scale per head row).
    #[arg(long, default_value_t = KvDtype::F32)]
    pub kv_cache_dtype: KvDtype,
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Write the scored positions' top-k log-probs here (run this on the base model).
    #[arg(long, conflicts_with = "kl_divergence")]
    pub save_logits: Option<PathBuf>,
    /// How many log-probs per position --save-logits keeps.
    #[arg(long, default_value_t = 64)]
    pub logits_top_k: u32,
    /// Score with a LoRA adapter: a PEFT directory or a llama.cpp LoRA GGUF.
    #[arg(long)]
    pub lora: Option<PathBuf>,
    /// Compare against log-probs saved with --save-logits: mean KL divergence and top-1 agreement.
    #[arg(long)]
    pub kl_divergence: Option<PathBuf>,
}

/// Where each scored position goes besides the NLL.
enum Extra {
    None,
    Save(LogProbWriter),
    Kl(LogProbReader, KlStats),
}

pub fn run(args: PplArgs) -> Result<()> {
    let loaded = crate::load_with_progress(&args.model)?;
    let text = std::fs::read_to_string(&args.text)
        .with_context(|| format!("reading {}", args.text.display()))?;
    let tokenize_start = Instant::now();
    let tokens = loaded.tokenizer.encode(&text, true)?;
    let adds_bos = loaded
        .tokenizer
        .bos_id()
        .is_some_and(|b| tokens.first() == Some(&b));
    let bos = if adds_bos {
        loaded.tokenizer.bos_id()
    } else {
        None
    };
    eprintln!(
        "tokenized {} tokens in {:.2} s (BOS per window: {})",
        tokens.len(),
        tokenize_start.elapsed().as_secs_f64(),
        adds_bos
    );
    let windows = perplexity::windows(&tokens, args.ctx, bos, args.chunks)?;
    let vocab = loaded.config.vocab_size;
    let kv = KvSpec {
        block_size: BLOCK_SIZE,
        num_blocks: args.ctx.div_ceil(BLOCK_SIZE),
        dtype: args.kv_cache_dtype,
    };
    eprintln!(
        "KV cache: {}, {} bytes per token",
        kv.dtype,
        kv.shape(&loaded.model).bytes_per_token()
    );
    let mut runner = ModelRunner::with_kv(loaded.model, kv, crate::thread_pool(args.threads));
    let adapter = crate::load_lora(&mut runner, args.lora.as_deref())?;
    let mut model = RunnerModel::new(runner, args.batch.unwrap_or(args.ctx)).with_adapter(adapter);
    let mut extra = open_extra(&args, vocab, &windows)?;
    let mut stats = NllStats::default();
    let mut on_token = |t: &ScoredToken<'_>| -> Result<(), perplexity::PerplexityError> {
        stats.push(-(t.logprobs[t.target as usize] as f64));
        match &mut extra {
            Extra::None => Ok(()),
            Extra::Save(w) => w.push(t.logprobs),
            Extra::Kl(r, kl) => {
                kl.push(&r.next_position()?, t.logprobs);
                Ok(())
            }
        }
    };
    let mut total_s = 0.0;
    let mut ppl_so_far = Vec::new();
    let mut on_window = |w: usize, secs: f64| {
        total_s += secs;
        ppl_so_far.push(w);
        eprint!("[{}/{}] {:.2} s  ", w + 1, windows.len(), secs);
    };
    perplexity::evaluate(&mut model, &windows, &mut on_token, &mut on_window)?;
    eprintln!();
    report(&stats, &extra, windows.len() * args.ctx, total_s);
    if let Extra::Save(w) = extra {
        w.finish()?;
    }
    Ok(())
}

fn open_extra(args: &PplArgs, vocab: usize, windows: &[Vec<u32>]) -> Result<Extra> {
    let header = LogProbHeader {
        vocab: vocab as u32,
        k: args.logits_top_k,
        ctx: args.ctx as u32,
        tokens: windows.concat(),
    };
    if let Some(path) = &args.save_logits {
        return Ok(Extra::Save(LogProbWriter::create(path, &header)?));
    }
    let Some(path) = &args.kl_divergence else {
        return Ok(Extra::None);
    };
    let reader = LogProbReader::open(path)?;
    let h = reader.header();
    if h.vocab != header.vocab || h.ctx != header.ctx || h.tokens != header.tokens {
        bail!(
            "{} was saved for other windows (vocab {}, ctx {}, {} tokens; this run: vocab {}, ctx {}, {} tokens)",
            path.display(), h.vocab, h.ctx, h.tokens.len(), header.vocab, header.ctx, header.tokens.len()
        );
    }
    Ok(Extra::Kl(reader, KlStats::default()))
}

fn report(stats: &NllStats, extra: &Extra, tokens_run: usize, seconds: f64) {
    let err = stats
        .ppl_error()
        .map_or("n/a".to_string(), |e| format!("{e:.4}"));
    println!(
        "PPL = {:.4} +/- {err}  ({} scored tokens)",
        stats.ppl(),
        stats.count()
    );
    println!(
        "speed: {:.1} tokens/s ({tokens_run} tokens in {seconds:.2} s)",
        tokens_run as f64 / seconds.max(1e-9)
    );
    if let Extra::Kl(_, kl) = extra {
        println!("mean KLD = {:.6} +/- {:.6}", kl.mean(), kl.mean_error());
        println!(
            "same top-1 = {:.3} +/- {:.3} %",
            kl.top1_percent(),
            kl.top1_percent_error()
        );
    }
}
