//! Wire types of tool calls in chat responses and chunks (OpenAI's shapes).

use serde::Serialize;
use utoipa::ToSchema;

use crate::tools::ToolCall;

/// The function a call names and its arguments (JSON text).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FunctionCallOut {
    pub name: String,
    pub arguments: String,
}

/// One call in an assistant message.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut,
}

impl From<ToolCall> for ToolCallOut {
    fn from(c: ToolCall) -> Self {
        ToolCallOut {
            id: c.id,
            kind: "function",
            function: FunctionCallOut {
                name: c.name,
                arguments: c.arguments,
            },
        }
    }
}

/// One call in a streamed delta: Kestrel sends each call whole, in one delta, with its
/// `index` among the message's calls (clients that accumulate argument fragments get one
/// fragment).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(flatten)]
    pub call: ToolCallOut,
}
