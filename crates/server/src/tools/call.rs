//! [`ToolCall`]: one parsed function call, and [`ParsedOutput`], a completion split into its
//! text and its calls.

use rand::distributions::Alphanumeric;
use rand::Rng;

/// A function call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id, which the client echoes back in the `tool` message that answers it.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments as JSON text (an object), as OpenAI sends them.
    pub arguments: String,
}

impl ToolCall {
    /// A call named `name` with `arguments` (serialized compactly, keys in order).
    pub(crate) fn new(name: String, arguments: &serde_json::Value, id: String) -> Self {
        ToolCall {
            id,
            name,
            arguments: arguments.to_string(),
        }
    }
}

/// A random id: `prefix` then `len` alphanumeric characters.
pub(crate) fn random_id(prefix: &str, len: usize) -> String {
    let tail: String = rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect();
    format!("{prefix}{tail}")
}

/// A completion's text split into the part meant for the user and the calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedOutput {
    /// The text outside the calls; `None` when it is empty or only whitespace.
    pub content: Option<String>,
    /// The calls, in the order written.
    pub calls: Vec<ToolCall>,
}

impl ParsedOutput {
    /// Output with no calls: the whole text is content.
    pub fn text(text: &str) -> Self {
        ParsedOutput {
            content: non_blank(text),
            calls: Vec::new(),
        }
    }
}

/// `text` unless it is blank.
pub(crate) fn non_blank(text: &str) -> Option<String> {
    (!text.trim().is_empty()).then(|| text.to_string())
}
