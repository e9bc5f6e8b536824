//! Tool calling: the function calls a model writes in its own text format, parsed into
//! OpenAI's `tool_calls`, whole ([`ToolCallFormat::parse`]) or while the text streams
//! ([`ToolCallStream`]); and the JSON schema that forces a call when `tool_choice` asks for one
//! ([`forced`]).

mod call;
mod choice;
pub mod forced;
mod format;
mod parse;
mod stream;
mod turns;

pub use call::{ParsedOutput, ToolCall};
pub use choice::{function_specs, FunctionSpec, ToolChoice, ToolRequestError};
pub use format::{ToolCallFormat, UnknownToolParser};
pub use stream::{StreamEvent, ToolCallStream};
pub use turns::template_tool_calls;
