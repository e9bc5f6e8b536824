//! `kestrel speed`: prompt-processing and generation throughput of one model, measured the way
//! `llama-bench` measures them (pp: one batch of N random tokens; tg: N single-token decode
//! steps from an empty context), so the numbers can be put beside llama.cpp's. `-p 0` or
//! `-n 0` skips a test.
//!
//! For tg it also reports the weight bytes one decode step reads (every layer and output
//! matrix, one embedding row) times tokens/s: the achieved memory bandwidth, which `--membw`
//! compares with a STREAM triad measured in the same run on the same threads.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use kestrel_engine::executor::{BatchInput, Executor, SeqBatch};
use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_model::runner::KvSpec;
use kestrel_model::ModelRunner;

use crate::membw::Bandwidth;
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
    /// KV cache storage: f32, f16 (half the memory) or q8 (int8 with one scale per head row).
    #[arg(long, default_value_t = KvDtype::F32)]
    pub kv_cache_dtype: KvDtype,
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also measure memory bandwidth (STREAM triad, `kestrel membw`) on the same threads and
    /// report the tg weight-read rate as a percentage of it.
    #[arg(long)]
    pub membw: bool,
}

pub fn run(args: SpeedArgs) -> Result<()> {
    let path = crate::resolve_model(args.model.clone())?;
    let loaded = crate::load_with_progress(&path)?;
    let bytes_per_token = decode_bytes_per_token(&loaded);
    let vocab = loaded.config.vocab_size as u32;
    let pool = crate::thread_pool(args.threads);
    let membw = match args.membw {
        true => Some(crate::membw::measure(
            pool,
            crate::membw::DEFAULT_MIB,
            crate::membw::DEFAULT_REPS,
        )?),
        false => None,
    };
    let blocks = args.prompt.max(args.gen).max(1).div_ceil(BLOCK_SIZE);
    let kv = KvSpec {
        block_size: BLOCK_SIZE,
        num_blocks: blocks,
        dtype: args.kv_cache_dtype,
    };
    let mut runner = ModelRunner::with_kv(loaded.model, kv, pool);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut tokens = |n: usize| {
        (0..n)
            .map(|_| rng.gen_range(0..vocab))
            .collect::<Vec<u32>>()
    };
    let table: Vec<u32> = (0..blocks as u32).collect();
    let pp_batch = BatchInput {
        seqs: vec![SeqBatch {
            request_id: 0,
            tokens: tokens(args.prompt),
            start_pos: 0,
            block_table: table.clone(),
            need_logits: true,
            adapter: None,
        }],
    };
    let gen_tokens = tokens(args.gen);
    let pp = (args.prompt > 0)
        .then(|| {
            measure(args.reps, args.prompt, || {
                runner.execute(&pp_batch).map(|_| ())
            })
        })
        .transpose()?;
    let tg = (args.gen > 0)
        .then(|| {
            measure(args.reps, args.gen, || {
                for (pos, t) in gen_tokens.iter().enumerate() {
                    let b = BatchInput {
                        seqs: vec![SeqBatch {
                            request_id: 0,
                            tokens: vec![*t],
                            start_pos: pos,
                            block_table: table.clone(),
                            need_logits: true,
                            adapter: None,
                        }],
                    };
                    runner.execute(&b)?;
                }
                Ok(())
            })
        })
        .transpose()?;
    let report = Report {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        threads: pool.n_threads(),
        args: &args,
        pp,
        tg,
        bytes_per_token,
        membw,
    };
    match args.json {
        true => println!("{}", report.json()),
        false => report.print_table(),
    }
    Ok(())
}

/// Weight bytes one decode step reads: every layer matrix (of a sparse layer, the experts a
/// token is routed to) and the output matrix once, plus one embedding row.
fn decode_bytes_per_token(loaded: &kestrel_model::LoadedModel) -> u64 {
    loaded.model.token_weight_bytes() as u64
}

/// Everything one `kestrel speed` run measured.
struct Report<'a> {
    name: String,
    threads: usize,
    args: &'a SpeedArgs,
    pp: Option<Rate>,
    tg: Option<Rate>,
    bytes_per_token: u64,
    membw: Option<Bandwidth>,
}

impl Report<'_> {
    /// Achieved weight-read bandwidth of the mean tg rate, GB/s.
    fn tg_gbs(&self) -> Option<f64> {
        self.tg
            .map(|tg| tg.mean * self.bytes_per_token as f64 / 1e9)
    }

    /// The achieved tg bandwidth as a percentage of the triad.
    fn tg_pct_of_triad(&self) -> Option<f64> {
        Some(100.0 * self.tg_gbs()? / self.membw?.triad_gbs)
    }

    fn json(&self) -> serde_json::Value {
        let rate = |r: Option<Rate>, n: usize| {
            r.map(|r| serde_json::json!({"tokens": n, "mean_tps": r.mean, "std_tps": r.std, "best_tps": r.best}))
        };
        let mut tg = rate(self.tg, self.args.gen);
        if let (Some(obj), Some(gbs)) = (tg.as_mut().and_then(|v| v.as_object_mut()), self.tg_gbs())
        {
            obj.insert("bytes_per_token".into(), self.bytes_per_token.into());
            obj.insert("gbs".into(), gbs.into());
            obj.insert("pct_of_triad".into(), self.tg_pct_of_triad().into());
        }
        serde_json::json!({"model": self.name, "threads": self.threads, "isa": kestrel_kernels::cpu::Isa::detected().name(),
            "kv_cache_dtype": self.args.kv_cache_dtype.name(), "pp": rate(self.pp, self.args.prompt), "tg": tg, "membw": self.membw})
    }

    fn print_table(&self) {
        println!("| model | threads | test | t/s |");
        println!("| --- | ---: | ---: | ---: |");
        let (name, threads) = (&self.name, self.threads);
        if let Some(pp) = self.pp {
            println!(
                "| {name} | {threads} | pp{} | {:.2} ± {:.2} |",
                self.args.prompt, pp.mean, pp.std
            );
        }
        if let Some(tg) = self.tg {
            println!(
                "| {name} | {threads} | tg{} | {:.2} ± {:.2} |",
                self.args.gen, tg.mean, tg.std
            );
        }
        if let Some(gbs) = self.tg_gbs() {
            let mb = self.bytes_per_token as f64 / 1e6;
            print!(
                "\ntg weight reads: {mb:.1} MB/token x {:.2} t/s = {gbs:.2} GB/s",
                gbs * 1e3 / mb
            );
            match (self.membw, self.tg_pct_of_triad()) {
                (Some(bw), Some(pct)) => println!(
                    " = {pct:.0}% of the triad ({:.2} GB/s on {} threads; read-only {:.2} GB/s)",
                    bw.triad_gbs, bw.threads, bw.read_gbs
                ),
                _ => println!(),
            }
        }
    }
}

/// Tokens/s over the timed repetitions of one test.
#[derive(Debug, Clone, Copy)]
struct Rate {
    mean: f64,
    std: f64,
    best: f64,
}

/// Tokens/s mean, standard deviation and best over `reps` runs of `f`, after one warm-up run.
fn measure(
    reps: usize,
    tokens: usize,
    mut f: impl FnMut() -> Result<(), kestrel_engine::executor::ExecutorError>,
) -> Result<Rate> {
    f()?;
    let mut rates = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        rates.push(tokens as f64 / start.elapsed().as_secs_f64());
    }
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64;
    let best = rates.iter().copied().fold(0.0, f64::max);
    Ok(Rate {
        mean,
        std: var.sqrt(),
        best,
    })
}
