//! `kestrel chat`: a terminal chat on the local model (served in-process on a loopback port) or
//! on any OpenAI-compatible server (`--url`). Answers stream as they are generated; Ctrl-C
//! stops the answer (the request is cancelled on the server), not the program.

mod client;
mod command;
mod conversation;
mod repl;

use std::path::PathBuf;

use anyhow::{Context, Result};
use kestrel_server::ServerConfig;

use crate::engine_args::EngineArgs;
use client::ChatClient;
use conversation::Conversation;

#[derive(clap::Args)]
pub struct ChatArgs {
    /// Chat with the server at this base URL (e.g. http://127.0.0.1:8000) instead of loading
    /// a model here.
    #[arg(long, conflicts_with = "model")]
    pub url: Option<String>,
    /// Bearer key for --url.
    #[arg(long, env = "KESTREL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The `model` to ask for [default: the first one the server lists].
    #[arg(long)]
    pub model_name: Option<String>,
    /// System prompt (change it later with /system).
    #[arg(long)]
    pub system: Option<String>,
    /// Sampling temperature (change it later with /temp).
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Keep generating past end-of-sequence tokens (for trying long answers).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Write the conversation here as JSON when the chat ends.
    #[arg(long)]
    pub save: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: ChatArgs) -> Result<()> {
    let local = match &args.url {
        Some(_) => None,
        None => Some(
            args.engine
                .launch_with(&args.engine.launch_options()?)?
                .0
                .into_state(),
        ),
    };
    let runtime = crate::runtime()?;
    runtime.block_on(async move {
        let (base, server) = match local {
            None => (args.url.clone().unwrap_or_default(), None),
            Some(state) => {
                let (base, server) = serve_locally(state).await?;
                (base, Some(server))
            }
        };
        let mut client = ChatClient::connect(&base, args.api_key.clone(), args.model_name.clone())
            .await
            .with_context(|| format!("cannot reach {base}"))?;
        let mut conversation = Conversation::new(args.system.clone(), args.temperature);
        conversation.max_tokens = args.max_tokens;
        conversation.ignore_eos = args.ignore_eos;
        let result = repl::run(&mut client, &mut conversation).await;
        if let Some(path) = &args.save {
            conversation.save(path)?;
        }
        if let Some(server) = server {
            server.stop().await;
        }
        result
    })
}

/// The in-process server of local mode.
struct LocalServer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl LocalServer {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Serves `state` on a free loopback port; returns its base URL.
async fn serve_locally(state: kestrel_server::AppState) -> Result<(String, LocalServer)> {
    let config = ServerConfig {
        hostname: "127.0.0.1".into(),
        port: 0,
        ..ServerConfig::default()
    };
    let listener = kestrel_server::bind(&config).await?;
    let addr = listener.local_addr().context("no local address")?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = kestrel_server::serve_on(listener, config, state, shutdown).await {
            eprintln!("local server failed: {e}");
        }
    });
    Ok((format!("http://{addr}"), LocalServer { stop, task }))
}
