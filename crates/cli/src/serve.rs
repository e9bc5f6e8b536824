//! `kestrel serve`: load a model, start the engine and serve the OpenAI- and TGI-compatible
//! HTTP API until SIGINT/SIGTERM.

use anyhow::{Context, Result};

use crate::engine_args::EngineArgs;
use crate::http_args::HttpArgs;
use crate::lora_args::LoraArgs;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
}

pub fn run(args: ServeArgs) -> Result<()> {
    let mut config = args.http.server_config()?;
    config.enable_runtime_lora = args.lora.enable_runtime_lora;
    let mut opts = args.engine.launch_options()?;
    args.lora.apply(&mut opts);
    let state = args.engine.launch_with(&opts)?.into_state();
    let runtime = crate::runtime()?;
    runtime.block_on(async move {
        let listener = kestrel_server::bind(&config).await?;
        let addr = listener.local_addr().context("no local address")?;
        println!(
            "kestrel serving {} on http://{addr}",
            state.model().model_id
        );
        let shutdown = crate::shutdown::bounded_signal(config.shutdown_deadline);
        kestrel_server::serve_on(listener, config, state, shutdown).await?;
        Ok(())
    })
}
