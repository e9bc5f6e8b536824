//! Tools on the chat route: the request's `tools` and `tool_choice`, checked into a
//! [`ToolMode`] (how the reply is read) and, when a call is forced, the grammar that forces it.

use kestrel_engine::constraint::GrammarSpec;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;
use crate::tools::{forced, function_specs, ToolCallFormat, ToolChoice};
use crate::validation::constraint;

/// How a chat reply is read for tool calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMode {
    /// `auto`, `required` or a named function (`none` has no mode).
    pub choice: ToolChoice,
    /// The model's call format: parses `auto` replies; shapes call ids.
    pub format: ToolCallFormat,
}

/// What a chat request's tool fields ask for.
#[derive(Debug, Clone, Default)]
pub struct ChatTools {
    /// The tools, for the chat template.
    pub tools: Option<Vec<Value>>,
    /// How to read the reply; `None` for plain text.
    pub mode: Option<ToolMode>,
    /// The grammar that forces a call (`required` or a named function).
    pub grammar: Option<GrammarSpec>,
}

impl ChatTools {
    /// Whether detokenization must keep special tokens (the format's markers are special).
    pub fn keeps_special_tokens(&self) -> bool {
        self.mode
            .as_ref()
            .is_some_and(|m| m.choice == ToolChoice::Auto && m.format.needs_special_tokens())
    }
}

/// What `tool_choice: "auto"` does on a model whose call format is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoWithoutFormat {
    /// A 400 naming `tool_choice` (chat completions, where the client chose `auto`).
    Refuse,
    /// The template still sees the tools; the reply is read as text (Messages and Responses,
    /// where agents send their tools with every turn whatever the model).
    ReadAsText,
}

/// Checks `tools`, `tool_choice` and `parallel_tool_calls`: a bad tool list or choice, a forced
/// call whose schema does not compile, and (unless `unknown` says otherwise) `auto` on a model
/// without a known call format are 400s naming the field.
pub fn checked(
    state: &AppState,
    tools: Option<Vec<Value>>,
    tool_choice: Option<&Value>,
    parallel: Option<bool>,
    unknown: AutoWithoutFormat,
) -> Result<ChatTools, ApiError> {
    let tools = tools.filter(|t| !t.is_empty());
    let functions = function_specs(tools.as_deref().unwrap_or_default())
        .map_err(|e| ApiError::param("tools", e.0))?;
    let choice = ToolChoice::from_request(tool_choice, &functions)
        .map_err(|e| ApiError::param("tool_choice", e.0))?;
    let known = state.model().tool_call_format;
    let format = match (&choice, known) {
        (ToolChoice::None, _) | (ToolChoice::Auto, None)
            if unknown == AutoWithoutFormat::ReadAsText || choice == ToolChoice::None =>
        {
            return Ok(ChatTools {
                tools,
                ..ChatTools::default()
            })
        }
        (ToolChoice::Auto, None) => {
            return Err(ApiError::param(
                "tool_choice",
                "tool_choice \"auto\" needs the model's tool-call format, which its chat \
                 template does not show: start the server with --tool-call-parser \
                 (hermes, llama3_json or mistral), or use \"required\" or a named function",
            ))
        }
        (_, Some(f)) => f,
        (_, None) => ToolCallFormat::Hermes,
    };
    let grammar = match forced::schema(&choice, &functions, parallel.unwrap_or(true)) {
        None => None,
        Some(schema) => Some(constraint::compiled(
            state,
            ("tool_choice", GrammarSpec::JsonSchema { schema }),
        )?),
    };
    Ok(ChatTools {
        tools,
        mode: Some(ToolMode { choice, format }),
        grammar,
    })
}
