//! The read–answer loop: lines from stdin, answers streamed to stdout, stats to stderr.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use super::client::ChatClient;
use super::command::{Command, HELP};
use super::conversation::Conversation;

/// Runs until `/quit` or the end of input.
pub async fn run(client: &mut ChatClient, conversation: &mut Conversation) -> Result<()> {
    // Listening for SIGINT from here on replaces its default (ending the process).
    let mut interrupts = signal(SignalKind::interrupt())?;
    let mut lines = stdin_lines();
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("chatting with {} — /help for commands", client.model);
    }
    loop {
        if interactive {
            print!("> ");
            std::io::stdout().flush()?;
        }
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = interrupts.recv() => {
                eprintln!("(Ctrl-D or /quit leaves)");
                continue;
            }
        };
        let Some(line) = line else { return Ok(()) };
        match Command::parse(&line) {
            Ok(Command::Quit) => return Ok(()),
            Ok(cmd) => handle(cmd, client, conversation, &mut interrupts).await?,
            Err(msg) => eprintln!("{msg}"),
        }
    }
}

async fn handle(
    cmd: Command,
    client: &mut ChatClient,
    conversation: &mut Conversation,
    interrupts: &mut tokio::signal::unix::Signal,
) -> Result<()> {
    match cmd {
        Command::Model(name) => switch_model(name, client).await,
        Command::Say(text) => answer(text, client, conversation, interrupts).await,
        Command::System(s) => {
            conversation.system = s;
            eprintln!(
                "system prompt {}",
                if conversation.system.is_some() {
                    "set"
                } else {
                    "cleared"
                }
            );
        }
        Command::Temp(t) => {
            conversation.temperature = t;
            eprintln!("temperature {t}");
        }
        Command::Reset => {
            conversation.turns.clear();
            eprintln!("conversation reset");
        }
        Command::Save(path) => match conversation.save(&path) {
            Ok(()) => eprintln!("saved to {}", path.display()),
            Err(e) => eprintln!("{e:#}"),
        },
        Command::Help => eprintln!("{HELP}"),
        Command::Quit | Command::Nothing => {}
    }
    Ok(())
}

/// `/model NAME`: later answers come from `NAME` (the conversation so far goes with them);
/// `/model`: lists the server's models.
async fn switch_model(name: Option<String>, client: &mut ChatClient) {
    let models = match client.models().await {
        Ok(models) => models,
        Err(e) => return eprintln!("error: {e:#}"),
    };
    match name {
        Some(name) if models.iter().any(|(id, _)| *id == name) => {
            eprintln!("chatting with {name}");
            client.model = name;
        }
        Some(name) => eprintln!("the server has no model {name:?} (/model lists them)"),
        None => {
            for (id, status) in models {
                let current = if id == client.model { " *" } else { "" };
                let status = status.map(|s| format!(" ({s})")).unwrap_or_default();
                eprintln!("  {id}{status}{current}");
            }
        }
    }
}

/// Streams the answer to `text`; Ctrl-C stops it. The answer (or the part that arrived) joins
/// the conversation; a failed request leaves the conversation as it was.
async fn answer(
    text: String,
    client: &ChatClient,
    conversation: &mut Conversation,
    interrupts: &mut tokio::signal::unix::Signal,
) {
    conversation.turns.push(("user".into(), text));
    let body = conversation.request(&client.model);
    let mut reply = String::new();
    let mut out = std::io::stdout();
    let result = {
        let print = |piece: &str| {
            reply.push_str(piece);
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        };
        tokio::select! {
            r = client.stream(&body, print) => Some(r),
            _ = interrupts.recv() => None,
        }
    };
    println!();
    match result {
        Some(Ok(stats)) => eprintln!("{}", stats.summary()),
        None => eprintln!("[stopped]"),
        Some(Err(e)) => {
            eprintln!("error: {e:#}");
            conversation.turns.pop();
            return;
        }
    }
    conversation.turns.push(("assistant".into(), reply));
}

/// Lines of stdin, read on a blocking thread.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}
