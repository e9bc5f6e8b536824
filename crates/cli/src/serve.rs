//! `kestrel serve`: load a model, start the engine and serve the OpenAI- and TGI-compatible
//! HTTP API until SIGINT/SIGTERM.

use anyhow::{Context, Result};

use crate::engine_args::EngineArgs;
use crate::http_args::HttpArgs;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub http: HttpArgs,
}

pub fn run(args: ServeArgs) -> Result<()> {
    let config = args.http.server_config()?;
    let state = args.engine.launch()?.into_state();
    let runtime = crate::runtime()?;
    runtime.block_on(async move {
        let listener = kestrel_server::bind(&config).await?;
        let addr = listener.local_addr().context("no local address")?;
        println!(
            "kestrel serving {} on http://{addr}",
            state.model().model_id
        );
        kestrel_server::serve_on(listener, config, state, kestrel_server::shutdown_signal())
            .await?;
        Ok(())
    })
}
