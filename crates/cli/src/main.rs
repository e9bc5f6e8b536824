//! `kestrel`: run, inspect and (later) serve LLMs on the CPU.

mod api_keys;
mod chat;
mod config_file;
mod convert;
mod default_model;
mod engine_args;
mod engine_watch;
mod gateway;
mod generate;
mod http_args;
mod inspect;
mod logging;
mod lora_args;
mod membw;
mod model_limit_args;
mod model_list;
mod model_size;
mod ppl;
mod quantize;
mod request_limit_args;
mod restart_args;
mod serve;
mod serve_models;
mod shutdown;
mod speed;
mod startup_summary;
mod trace_args;
mod worker;
mod worker_models;

use anyhow::Result;
use clap::Subcommand;

#[derive(clap::Parser)]
#[command(name = "kestrel", version, about = "Fast LLM inference on the CPU")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as text or as one JSON object per line (the level comes from KESTREL_LOG or
    /// RUST_LOG, e.g. `info,kestrel::request=warn`; serve, gateway and worker default to info).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "KESTREL_LOG_FORMAT",
        default_value_t = logging::LogFormat::Text
    )]
    log_format: logging::LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (or a chat message) and stream it to stdout.
    Generate(generate::GenerateArgs),
    /// Chat in the terminal with a model loaded here or with an OpenAI-compatible server.
    Chat(chat::ChatArgs),
    /// Describe a model file: architecture, parameters, tensor types, sizes, chat template.
    Inspect(inspect::InspectArgs),
    /// Load-test an OpenAI-compatible server (Kestrel's or any other) and report TTFT, TPOT,
    /// ITL and end-to-end latency percentiles and throughput (`--multi-turn`: conversations,
    /// with TTFT and prefix-cache hit rate per turn).
    #[command(args_conflicts_with_subcommands = true)]
    Bench(kestrel_bench::BenchArgs),
    /// Measure prompt-processing and generation tokens/s of a model (llama-bench's pp/tg tests).
    Speed(speed::SpeedArgs),
    /// Measure memory bandwidth (STREAM triad) on 1 and 2 threads of Kestrel's pool.
    Membw(membw::MembwArgs),
    /// Make sure the default model is cached (fetching it with pip if needed); print its path.
    Fetch,
    /// Serve the OpenAI- and TGI-compatible HTTP API.
    Serve(Box<serve::ServeArgs>),
    /// Serve the same HTTP API as `serve` in front of a fleet of workers behind Redis (loads no
    /// weights).
    Gateway(gateway::GatewayArgs),
    /// Run an engine that takes requests from a gateway's Redis queue.
    Worker(worker::WorkerArgs),
    /// Perplexity on a text file, like llama.cpp's llama-perplexity (and KL divergence vs a base).
    Ppl(ppl::PplArgs),
    /// Convert GGUF -> HF safetensors directory, or HF directory -> GGUF.
    Convert(convert::ConvertArgs),
    /// Quantize a GGUF file or HF directory to q8_0, q4_0, q4_1, q4_k or q6_k GGUF.
    Quantize(quantize::QuantizeArgs),
}

fn main() -> Result<()> {
    let cli: Cli = config_file::parse(std::env::args_os().collect())?;
    let server = matches!(
        cli.command,
        Command::Serve(_) | Command::Gateway(_) | Command::Worker(_)
    );
    logging::init(cli.log_format, if server { "info" } else { "error" });
    match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Gateway(args) => gateway::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Bench(args) => {
            if let Some(kestrel_bench::BenchCommand::Compare { a, b }) = &args.command {
                let (a, b) = (
                    kestrel_bench::compare::read_report(a)?,
                    kestrel_bench::compare::read_report(b)?,
                );
                print!("{}", kestrel_bench::compare::render(&a, &b));
                return Ok(());
            }
            if args.multi_turn {
                let report = kestrel_bench::multi_turn::run_blocking(args)?;
                println!("{}", report.render_table());
                return Ok(());
            }
            let report = kestrel_bench::run_blocking(args)?;
            println!("{}", report.render_table());
            Ok(())
        }
        Command::Speed(args) => speed::run(args),
        Command::Membw(args) => membw::run(args),
        Command::Ppl(args) => ppl::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Fetch => {
            println!("{}", default_model::ensure_default_model()?.display());
            Ok(())
        }
    }
}

/// The model to use: `--model` if given, else the default model (fetched on first use).
pub fn resolve_model(model: Option<std::path::PathBuf>) -> Result<std::path::PathBuf> {
    match model {
        Some(path) => Ok(path),
        None => default_model::ensure_default_model(),
    }
}

/// Load a model with a spinner on stderr.
pub fn load_with_progress(path: &std::path::Path) -> Result<kestrel_model::LoadedModel> {
    let spinner =
        indicatif::ProgressBar::new_spinner().with_message(format!("loading {}", path.display()));
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let start = std::time::Instant::now();
    let loaded = kestrel_quant::load_model(path);
    spinner.finish_and_clear();
    let loaded = loaded.map_err(|e| anyhow::anyhow!("cannot load {}: {e}", path.display()))?;
    tracing::info!(
        elapsed_ms = start.elapsed().as_millis() as u64,
        "model loaded"
    );
    Ok(loaded)
}

/// Load the `--lora` adapter at `path` (if any) into `runner`, named after its file.
pub fn load_lora(
    runner: &mut kestrel_model::ModelRunner,
    path: Option<&std::path::Path>,
) -> Result<Option<kestrel_engine::adapter_id::AdapterId>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let name = lora_name(path);
    let id = runner
        .load_adapter(&name, path)
        .map_err(|e| anyhow::anyhow!("cannot load LoRA adapter {}: {e}", path.display()))?;
    eprintln!("LoRA adapter {name} loaded from {}", path.display());
    Ok(Some(id))
}

/// The name an adapter given by path goes by: its file name.
pub fn lora_name(path: &std::path::Path) -> String {
    path.file_name()
        .map_or_else(|| "lora".into(), |n| n.to_string_lossy().into_owned())
}

/// The worker pool: `threads` workers if given, else the process-wide pool.
pub fn thread_pool(
    threads: Option<usize>,
) -> &'static kestrel_kernels::cpu::threadpool::ThreadPool {
    match threads {
        // Leaked on purpose: the pool lives as long as the process, like the global one.
        Some(n) => Box::leak(Box::new(kestrel_kernels::cpu::threadpool::ThreadPool::new(
            n.max(1),
        ))),
        None => kestrel_kernels::cpu::threadpool::ThreadPool::global(),
    }
}

/// The async runtime of the HTTP front ends (two workers: the engine has its own threads).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
