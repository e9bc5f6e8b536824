//! `kestrel speed`: prompt-processing and generation throughput of one model, measured the way
//! `llama-bench` measures them (pp: one batch of N random tokens; tg: N single-token decode
//! steps from an empty context), so the numbers can be put beside llama.cpp's. `-p 0` or
//! `-n 0` skips a test.
//!
//! `--depth N` (llama-bench's `-d`) first fills N tokens of context into every sequence's KV,
//! untimed, then measures pp and tg after it: what attention costs at long context.
//!
//! For tg it also reports the weight bytes one decode step reads (every layer and output
//! matrix, one embedding row) times tokens/s: the achieved memory bandwidth, which `--membw`
//! compares with a STREAM triad measured in the same run on the same threads.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::executor::{BatchInput, Executor, ExecutorError, SeqBatch};
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
    /// Tokens of context already in the KV cache before each test (filled once, untimed):
    /// pp and tg are measured after this many tokens, as llama-bench's `-d`.
    #[arg(short = 'd', long, default_value_t = 0)]
    pub depth: usize,
    /// Sequences decoded together in each tg step (each with its own KV); t/s counts all.
    #[arg(long, default_value_t = 1)]
    pub seqs: usize,
    /// LoRA adapters (PEFT directories or LoRA GGUFs): sequence `i` decodes
    /// with adapter `i mod n`. tg is then measured with and without the adapters, alternating
    /// repetitions, and each adapter's load time is reported.
    #[arg(long, num_args = 1..)]
    pub lora: Vec<PathBuf>,
    /// Latent attention (DeepSeek): prefill chunks of at least this many tokens expand the
    /// latents into per-head keys and values; shorter ones attend with absorbed queries
    /// [default: the model's threshold, 32]. A value above `-p` measures the absorbed path.
    #[arg(long)]
    pub mla_prefill_min_tokens: Option<usize>,
}

pub fn run(args: SpeedArgs) -> Result<()> {
    let path = crate::resolve_model(args.model.clone())?;
    let mut loaded = crate::load_with_progress(&path)?;
    if let Some(n) = args.mla_prefill_min_tokens {
        loaded.model.set_latent_prefill_min_tokens(n);
    }
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
    let blocks = (args.depth + args.prompt.max(args.gen).max(1)).div_ceil(BLOCK_SIZE);
    let seqs = args.seqs.max(1);
    let kv = KvSpec {
        block_size: BLOCK_SIZE,
        num_blocks: blocks * seqs,
        dtype: args.kv_cache_dtype,
    };
    let mut runner = ModelRunner::with_kv(loaded.model, kv, pool);
    let kv_bytes_per_step = kv_bytes_per_step(&args, runner.kv_shape().bytes_per_token());
    let (adapters, lora_load_ms) = load_adapters(&mut runner, &args.lora)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut tokens = |n: usize| {
        (0..n)
            .map(|_| rng.gen_range(0..vocab))
            .collect::<Vec<u32>>()
    };
    let pp_batch = BatchInput {
        seqs: vec![SeqBatch {
            request_id: 0,
            tokens: tokens(args.prompt),
            start_pos: args.depth,
            block_table: (0..blocks as u32).collect(),
            num_logits: 1,
            adapter: None,
        }],
    };
    let decode = DecodeRun {
        tokens: tokens(args.gen),
        seqs,
        blocks,
        start: args.depth,
    };
    if args.depth > 0 {
        let context = tokens(args.depth);
        decode.fill_context(&mut runner, &context)?;
    }
    let pp = (args.prompt > 0)
        .then(|| {
            measure(args.reps, args.prompt, || {
                runner.execute(&pp_batch).map(|_| ())
            })
        })
        .transpose()?;
    let (tg, tg_lora) = match args.gen {
        0 => (None, None),
        _ if adapters.is_empty() => {
            let tg = measure(args.reps, args.gen * seqs, || {
                decode.run(&mut runner, &[None])
            })?;
            (Some(tg), None)
        }
        _ => {
            let (base, lora) = measure_pair(args.reps, args.gen * seqs, |with| {
                let base: &[Option<AdapterId>] = &[None];
                decode.run(&mut runner, if with { &adapters } else { base })
            })?;
            (Some(base), Some(lora))
        }
    };
    let report = Report {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        threads: pool.n_threads(),
        args: &args,
        pp,
        tg,
        tg_lora,
        lora_load_ms,
        bytes_per_token,
        kv_bytes_per_step,
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

/// KV bytes one tg step reads on average: every sequence's context (the depth, plus half the
/// generated tokens) in every layer, as if no layer had a sliding window.
fn kv_bytes_per_step(args: &SpeedArgs, kv_bytes_per_token: usize) -> u64 {
    let mean_context = args.depth + args.gen.saturating_sub(1) / 2;
    (args.seqs.max(1) * mean_context * kv_bytes_per_token) as u64
}

/// Everything one `kestrel speed` run measured.
struct Report<'a> {
    name: String,
    threads: usize,
    args: &'a SpeedArgs,
    pp: Option<Rate>,
    tg: Option<Rate>,
    /// tg with the `--lora` adapters (same sequences, alternating with `tg`).
    tg_lora: Option<Rate>,
    lora_load_ms: Vec<f64>,
    bytes_per_token: u64,
    /// KV bytes a tg step reads (see [`kv_bytes_per_step`]).
    kv_bytes_per_step: u64,
    membw: Option<Bandwidth>,
}

impl Report<'_> {
    /// Bytes one tg step reads: the weights once, and every sequence's KV.
    fn step_bytes(&self) -> u64 {
        self.bytes_per_token + self.kv_bytes_per_step
    }

    /// Achieved read bandwidth of the mean tg rate, GB/s (a step of `--seqs` sequences reads
    /// the weights once and each sequence's KV).
    fn tg_gbs(&self) -> Option<f64> {
        let steps = |tg: Rate| tg.mean / self.args.seqs.max(1) as f64;
        self.tg.map(|tg| steps(tg) * self.step_bytes() as f64 / 1e9)
    }

    /// ` @ dN` after a test's name when it ran after N tokens of context (llama-bench's label).
    fn at_depth(&self) -> String {
        match self.args.depth {
            0 => String::new(),
            d => format!(" @ d{d}"),
        }
    }

    /// Time of a tg step with the adapters over the time without them.
    fn lora_cost(&self) -> Option<f64> {
        Some(self.tg?.mean / self.tg_lora?.mean)
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
            obj.insert("kv_bytes_per_step".into(), self.kv_bytes_per_step.into());
            obj.insert("gbs".into(), gbs.into());
            obj.insert("pct_of_triad".into(), self.tg_pct_of_triad().into());
        }
        let lora = self.lora_cost().map(|cost| {
            serde_json::json!({"adapters": self.lora_load_ms.len(), "load_ms": self.lora_load_ms,
                "tg": rate(self.tg_lora, self.args.gen), "cost": cost})
        });
        serde_json::json!({"model": self.name, "threads": self.threads, "isa": kernels_name(),
            "depth": self.args.depth,
            "kv_cache_dtype": self.args.kv_cache_dtype.name(), "pp": rate(self.pp, self.args.prompt), "tg": tg,
            "seqs": self.args.seqs, "lora": lora, "membw": self.membw})
    }

    fn print_table(&self) {
        println!("| model | threads | test | t/s |");
        println!("| --- | ---: | ---: | ---: |");
        let (name, threads) = (&self.name, self.threads);
        if let Some(pp) = self.pp {
            println!(
                "| {name} | {threads} | pp{}{} | {:.2} ± {:.2} |",
                self.args.prompt,
                self.at_depth(),
                pp.mean,
                pp.std
            );
        }
        let tg_test = match self.args.seqs {
            0 | 1 => format!("tg{}{}", self.args.gen, self.at_depth()),
            n => format!("tg{}{} x{n} seqs", self.args.gen, self.at_depth()),
        };
        if let Some(tg) = self.tg {
            println!(
                "| {name} | {threads} | {tg_test} | {:.2} ± {:.2} |",
                tg.mean, tg.std
            );
        }
        if let Some(tg) = self.tg_lora {
            let n = self.lora_load_ms.len();
            println!(
                "| {name} | {threads} | {tg_test}, {n} LoRA | {:.2} ± {:.2} |",
                tg.mean, tg.std
            );
        }
        if let Some(cost) = self.lora_cost() {
            let ms: Vec<String> = self
                .lora_load_ms
                .iter()
                .map(|m| format!("{m:.1}"))
                .collect();
            println!(
                "\nLoRA: decode takes {cost:.2}x the base time; adapters loaded in {} ms",
                ms.join(", ")
            );
        }
        if let Some(gbs) = self.tg_gbs() {
            let mb = self.step_bytes() as f64 / 1e6;
            let kv = match self.kv_bytes_per_step {
                0 => String::new(),
                kv => format!(
                    " ({:.1} weights + {:.1} KV)",
                    self.bytes_per_token as f64 / 1e6,
                    kv as f64 / 1e6
                ),
            };
            print!(
                "\ntg reads: {mb:.1} MB/step{kv} x {:.2} steps/s = {gbs:.2} GB/s",
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

/// Load `paths` as adapters `lora0`, `lora1`, ...; their ids (as sequences pick them) and
/// load times in milliseconds.
fn load_adapters(
    runner: &mut ModelRunner,
    paths: &[PathBuf],
) -> Result<(Vec<Option<AdapterId>>, Vec<f64>)> {
    let (mut ids, mut ms) = (Vec::new(), Vec::new());
    for (i, path) in paths.iter().enumerate() {
        let start = Instant::now();
        let id = runner
            .load_adapter(&format!("lora{i}"), path)
            .map_err(|e| anyhow::anyhow!("cannot load LoRA adapter {}: {e}", path.display()))?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
        ids.push(Some(id));
    }
    Ok((ids, ms))
}

/// The tg test: `seqs` sequences, each with its own `blocks` KV blocks, decoding `tokens`
/// one step at a time after `start` tokens of context.
struct DecodeRun {
    tokens: Vec<u32>,
    seqs: usize,
    blocks: usize,
    start: usize,
}

impl DecodeRun {
    /// Every step of the test; sequence `i` runs with `adapters[i % adapters.len()]`.
    fn run(
        &self,
        runner: &mut ModelRunner,
        adapters: &[Option<AdapterId>],
    ) -> Result<(), ExecutorError> {
        for (pos, &t) in self.tokens.iter().enumerate() {
            runner.execute(&self.step(self.start + pos, t, adapters))?;
        }
        Ok(())
    }

    fn step(&self, pos: usize, token: u32, adapters: &[Option<AdapterId>]) -> BatchInput {
        let seq = |i: usize| SeqBatch {
            adapter: adapters[i % adapters.len()],
            ..self.seq(i, vec![token], pos)
        };
        BatchInput {
            seqs: (0..self.seqs).map(seq).collect(),
        }
    }

    /// Sequence `i`'s `tokens` at `start_pos`, in its own blocks, with one row of logits.
    fn seq(&self, i: usize, tokens: Vec<u32>, start_pos: usize) -> SeqBatch {
        SeqBatch {
            request_id: i as u64,
            tokens,
            start_pos,
            block_table: ((i * self.blocks) as u32..((i + 1) * self.blocks) as u32).collect(),
            num_logits: 1,
            adapter: None,
        }
    }

    /// Writes `context` (positions `0..start`) into every sequence's KV, in prefill chunks.
    fn fill_context(&self, runner: &mut ModelRunner, context: &[u32]) -> Result<(), ExecutorError> {
        const CHUNK: usize = 512;
        for i in 0..self.seqs {
            for (c, chunk) in context.chunks(CHUNK).enumerate() {
                let input = BatchInput {
                    seqs: vec![self.seq(i, chunk.to_vec(), c * CHUNK)],
                };
                runner.execute(&input)?;
            }
        }
        Ok(())
    }
}

/// [`measure`] for two variants of a test (`f(false)`, `f(true)`), their repetitions
/// alternating so that both see the same machine.
fn measure_pair(
    reps: usize,
    tokens: usize,
    mut f: impl FnMut(bool) -> Result<(), ExecutorError>,
) -> Result<(Rate, Rate)> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    f(false)?;
    f(true)?;
    for _ in 0..reps.max(1) {
        for (with, rates) in [(false, &mut a), (true, &mut b)] {
            let start = Instant::now();
            f(with)?;
            rates.push(tokens as f64 / start.elapsed().as_secs_f64());
        }
    }
    Ok((Rate::of(&a), Rate::of(&b)))
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
    mut f: impl FnMut() -> Result<(), ExecutorError>,
) -> Result<Rate> {
    f()?;
    let mut rates = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        rates.push(tokens as f64 / start.elapsed().as_secs_f64());
    }
    Ok(Rate::of(&rates))
}

impl Rate {
    fn of(rates: &[f64]) -> Rate {
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64;
        let best = rates.iter().copied().fold(0.0, f64::max);
        Rate {
            mean,
            std: var.sqrt(),
            best,
        }
    }
}

/// The kernels the products run on, as the report names them: the ISA, and whether AMX tile
/// products take the calls of 4 or more rows.
fn kernels_name() -> String {
    use kestrel_kernels::cpu::Isa;
    let isa = Isa::detected().name();
    if Isa::tiles() {
        format!("{isa} with AMX tiles for products of 4 or more rows")
    } else {
        isa.to_string()
    }
}
