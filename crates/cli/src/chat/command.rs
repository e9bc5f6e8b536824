//! [`Command`]: one line typed at the chat prompt.

use std::path::PathBuf;

/// What a line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// A message to the model.
    Say(String),
    /// `/system [text]`: set (or, without text, clear) the system prompt.
    System(Option<String>),
    /// `/temp <t>`: the sampling temperature.
    Temp(f32),
    /// `/model [name]`: ask another of the server's models from now on (without a name: list
    /// them).
    Model(Option<String>),
    /// `/reset`: forget the conversation (the system prompt stays).
    Reset,
    /// `/save <file>`: write the conversation as JSON.
    Save(PathBuf),
    /// `/help`.
    Help,
    /// `/quit` or `/exit`.
    Quit,
    /// A blank line.
    Nothing,
}

pub const HELP: &str = "\
commands:
  /system [text]  set the system prompt (no text: clear it)
  /temp <t>       sampling temperature (0 = greedy)
  /model [name]   chat with another of the server's models (no name: list them)
  /reset          start a new conversation
  /save <file>    write the conversation as JSON
  /help           this list
  /quit           leave (also Ctrl-D)
Ctrl-C stops an answer while it streams.";

impl Command {
    /// Parses a line; an unknown or malformed command is an error naming it.
    pub fn parse(line: &str) -> Result<Command, String> {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() {
            return Ok(Command::Nothing);
        }
        let Some(rest) = line.strip_prefix('/') else {
            return Ok(Command::Say(line.to_string()));
        };
        let (name, arg) = match rest.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (rest, ""),
        };
        match name {
            "system" => Ok(Command::System((!arg.is_empty()).then(|| arg.to_string()))),
            "temp" => arg
                .parse::<f32>()
                .ok()
                .filter(|t| t.is_finite() && *t >= 0.0)
                .map(Command::Temp)
                .ok_or_else(|| format!("/temp needs a number >= 0, got {arg:?}")),
            "model" => Ok(Command::Model((!arg.is_empty()).then(|| arg.to_string()))),
            "reset" => Ok(Command::Reset),
            "save" if !arg.is_empty() => Ok(Command::Save(PathBuf::from(arg))),
            "save" => Err("/save needs a file name".into()),
            "help" | "?" => Ok(Command::Help),
            "quit" | "exit" => Ok(Command::Quit),
            other => Err(format!("unknown command /{other} (try /help)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_messages_and_commands() {
        assert_eq!(
            Command::parse("hello /there"),
            Ok(Command::Say("hello /there".into()))
        );
        assert_eq!(Command::parse("   \n"), Ok(Command::Nothing));
        assert_eq!(
            Command::parse("/system Be brief."),
            Ok(Command::System(Some("Be brief.".into())))
        );
        assert_eq!(Command::parse("/system"), Ok(Command::System(None)));
        assert_eq!(Command::parse("/temp 0.2"), Ok(Command::Temp(0.2)));
        assert!(Command::parse("/temp hot").is_err());
        assert!(Command::parse("/temp -1").is_err());
        assert_eq!(
            Command::parse("/save a.json"),
            Ok(Command::Save("a.json".into()))
        );
        assert!(Command::parse("/save").is_err());
        assert_eq!(Command::parse("/exit"), Ok(Command::Quit));
        assert_eq!(
            Command::parse("/model gemma"),
            Ok(Command::Model(Some("gemma".into())))
        );
        assert_eq!(Command::parse("/model"), Ok(Command::Model(None)));
        let err = Command::parse("/frobnicate").expect_err("unknown");
        assert!(err.contains("/frobnicate"));
    }
}
