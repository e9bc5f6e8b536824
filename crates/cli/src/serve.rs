//! `kestrel serve`: load a model, start the engine and serve the OpenAI- and TGI-compatible
//! HTTP API until SIGINT/SIGTERM.

use anyhow::{bail, Context, Result};

use crate::engine_args::EngineArgs;
use crate::http_args::HttpArgs;
use crate::lora_args::LoraArgs;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The model, as with `--model` (`kestrel serve model.gguf`, like `vllm serve MODEL`).
    #[arg(value_name = "MODEL")]
    pub model_path: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
}

pub fn run(mut args: ServeArgs) -> Result<()> {
    if let Some(path) = args.model_path.take() {
        if args.engine.model.as_ref().is_some_and(|m| *m != path) {
            bail!("the model is given twice, as an argument and with --model (or MODEL_ID)");
        }
        args.engine.model = Some(path);
    }
    let mut config = args.http.server_config()?;
    config.enable_runtime_lora = args.lora.enable_runtime_lora;
    let mut opts = args.engine.launch_options()?;
    args.lora.apply(&mut opts);
    let launched = args.engine.launch_with(&opts)?;
    let engine = launched.engine.clone();
    let state = launched.into_state();
    let watch = crate::engine_watch::EngineWatch::default();
    let runtime = crate::runtime()?;
    runtime.block_on(async move {
        let listener = kestrel_server::bind(&config).await?;
        let addr = listener.local_addr().context("no local address")?;
        println!(
            "kestrel serving {} on http://{addr}",
            state.model().model_id
        );
        let signal = crate::shutdown::bounded_signal(config.shutdown_deadline);
        let stop = watch.clone().stop_signal(engine, signal);
        kestrel_server::serve_on(listener, config, state, stop).await?;
        if watch.engine_died() {
            bail!(
                "the engine stopped unexpectedly (see the log); exiting so the server is replaced"
            );
        }
        Ok(())
    })
}
