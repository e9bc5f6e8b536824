//! `kestrel speed`: prompt-processing and generation throughput of one model, measured the way
//! `llama-bench` measures them (pp: one batch of N random tokens; tg: N single-token decode
//! steps from an empty context), so the numbers can be put beside llama.cpp's.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use kestrel_engine::executor::{BatchInput, Executor, SeqBatch};
use kestrel_model::ModelRunner;
use rand::{Rng, SeedableRng};

const BLOCK_SIZE: usize = 16;

#[derive(clap::Args)]
pub struct SpeedArgs {
    /// A .gguf file or an HF checkpoint directory [default: the default model].
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Prompt tokens per pp run.
    #[arg(short = 'p', long, default_value_t = 512)]
    pub prompt: usize,
    /// Generated tokens per tg run.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub gen: usize,
    /// Repetitions of each test (after one warm-up).
    #[arg(short = 'r', long, default_value_t = 3)]
    pub reps: usize,
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SpeedArgs) -> Result<()> {
    let path = crate::resolve_model(args.model.clone())?;
    let loaded = crate::load_with_progress(&path)?;
    let vocab = loaded.config.vocab_size as u32;
    let pool = crate::thread_pool(args.threads);
    let blocks = args.prompt.max(args.gen).div_ceil(BLOCK_SIZE);
    let mut runner = ModelRunner::new(loaded.model, BLOCK_SIZE, blocks, pool);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut tokens = |n: usize| (0..n).map(|_| rng.gen_range(0..vocab)).collect::<Vec<u32>>();
    let table: Vec<u32> = (0..blocks as u32).collect();
    let pp_batch = BatchInput { seqs: vec![SeqBatch { tokens: tokens(args.prompt), start_pos: 0, block_table: table.clone(), need_logits: true }] };
    let pp = measure(args.reps, args.prompt, || {
        runner.execute(&pp_batch).map(|_| ())
    })?;
    let gen_tokens = tokens(args.gen);
    let tg = measure(args.reps, args.gen, || {
        for (pos, t) in gen_tokens.iter().enumerate() {
            let b = BatchInput { seqs: vec![SeqBatch { tokens: vec![*t], start_pos: pos, block_table: table.clone(), need_logits: true }] };
            runner.execute(&b)?;
        }
        Ok(())
    })?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let threads = pool.n_threads();
    if args.json {
        println!(
            "{}",
            serde_json::json!({"model": name, "threads": threads, "isa": kestrel_kernels::cpu::Isa::detected().name(),
                "pp": {"tokens": args.prompt, "mean_tps": pp.0, "std_tps": pp.1},
                "tg": {"tokens": args.gen, "mean_tps": tg.0, "std_tps": tg.1}})
        );
    } else {
        println!("| model | threads | test | t/s |");
        println!("| --- | ---: | ---: | ---: |");
        println!("| {name} | {threads} | pp{} | {:.2} ± {:.2} |", args.prompt, pp.0, pp.1);
        println!("| {name} | {threads} | tg{} | {:.2} ± {:.2} |", args.gen, tg.0, tg.1);
    }
    Ok(())
}

/// Tokens/s mean and standard deviation over `reps` runs of `f`, after one warm-up run.
fn measure(reps: usize, tokens: usize, mut f: impl FnMut() -> Result<(), kestrel_engine::executor::ExecutorError>) -> Result<(f64, f64)> {
    f()?;
    let mut rates = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        rates.push(tokens as f64 / start.elapsed().as_secs_f64());
    }
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64;
    Ok((mean, var.sqrt()))
}
