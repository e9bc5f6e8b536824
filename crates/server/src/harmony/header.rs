//! [`Header`]: what a harmony message header says — its channel and recipient.

use super::{CHANNEL, CONSTRAIN, START};

/// A parsed header (the text before `<|message|>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    /// `analysis`, `commentary`, `final`, … (empty when the header names none).
    pub channel: String,
    /// The `to=` recipient (`functions.get_weather`), if any.
    pub recipient: Option<String>,
}

impl Header {
    /// Reads `text`: `[<|start|>]role [to=R] <|channel|>C [to=R] [<|constrain|>T | T]`, the
    /// parts in any order.
    pub fn parse(text: &str) -> Header {
        let text = text.trim_start().strip_prefix(START).unwrap_or(text);
        Header {
            channel: after(text, CHANNEL).unwrap_or_default(),
            recipient: after(text, "to="),
        }
    }

    /// The function a message to `functions.NAME` (or another recipient) calls.
    pub fn call_name(&self) -> Option<&str> {
        let to = self.recipient.as_deref()?;
        Some(to.strip_prefix("functions.").unwrap_or(to))
    }

    /// Whether the body is reasoning.
    pub fn is_reasoning(&self) -> bool {
        self.recipient.is_none() && self.channel == "analysis"
    }
}

/// The word after `marker` in `text`: up to a blank or the next `<|`.
fn after(text: &str, marker: &str) -> Option<String> {
    let at = text.find(marker)? + marker.len();
    let rest = text[at..].trim_start();
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(rest.len());
    let word = &rest[..end];
    (!word.is_empty() && !word.starts_with(CONSTRAIN)).then(|| word.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_and_recipient_in_either_order() {
        let h = Header::parse(
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json",
        );
        assert_eq!(h.channel, "commentary");
        assert_eq!(h.call_name(), Some("get_weather"));
        let h = Header::parse(" to=functions.add<|channel|>commentary json");
        assert_eq!(
            (h.channel.as_str(), h.call_name()),
            ("commentary", Some("add"))
        );
        let h = Header::parse("<|channel|>analysis");
        assert!(h.is_reasoning() && h.recipient.is_none());
        assert_eq!(Header::parse("assistant").channel, "");
    }
}
