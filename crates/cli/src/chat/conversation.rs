//! [`Conversation`]: the chat so far and the settings of the next answer.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value};

/// The system prompt, the turns, and the sampling settings.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub system: Option<String>,
    /// `(role, content)` pairs, user and assistant alternating.
    pub turns: Vec<(String, String)>,
    pub temperature: f32,
    pub max_tokens: usize,
    pub ignore_eos: bool,
}

impl Conversation {
    pub fn new(system: Option<String>, temperature: f32) -> Self {
        Conversation {
            system,
            turns: Vec::new(),
            temperature,
            max_tokens: 512,
            ignore_eos: false,
        }
    }

    /// The chat request for the next answer (streamed, with usage).
    pub fn request(&self, model: &str) -> Value {
        let mut messages = Vec::with_capacity(self.turns.len() + 1);
        if let Some(s) = &self.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        for (role, content) in &self.turns {
            messages.push(json!({"role": role, "content": content}));
        }
        let mut body = json!({
            "model": model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if self.ignore_eos {
            body["ignore_eos"] = json!(true);
        }
        body
    }

    /// Writes the conversation as JSON (`system`, `messages`, `temperature`).
    pub fn save(&self, path: &Path) -> Result<()> {
        let messages: Vec<Value> = self
            .turns
            .iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let doc = json!({
            "system": self.system,
            "messages": messages,
            "temperature": self.temperature,
        });
        let text = serde_json::to_string_pretty(&doc)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_carries_system_turns_and_settings() {
        let mut c = Conversation::new(Some("Be brief.".into()), 0.0);
        c.turns.push(("user".into(), "Hi".into()));
        c.turns.push(("assistant".into(), "Hello!".into()));
        c.turns.push(("user".into(), "Bye".into()));
        let body = c.request("m");
        let msgs = body["messages"].as_array().expect("messages");
        assert_eq!(msgs.len(), 4);
        assert_eq!(msgs[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(msgs[3]["content"], "Bye");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["stream"], true);
        assert!(body.get("ignore_eos").is_none());
    }
}
