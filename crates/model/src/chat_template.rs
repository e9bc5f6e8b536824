//! HF-compatible chat templates, rendered with minijinja.
//!
//! [`ChatTemplate`] mirrors what `transformers`' `apply_chat_template` provides to a template:
//!
//! * the environment: `trim_blocks` and `lstrip_blocks` on, loop controls (`{% break %}`), and
//!   Python string/dict/list methods (`.strip()`, `.startswith()`, `.items()`, ...) through
//!   minijinja-contrib's pycompat;
//! * the variables: `messages` (role, content, and for tool use `tool_calls`, `tool_call_id`,
//!   `name`), `add_generation_prompt`, `bos_token`, `eos_token`, and `tools` (the request's
//!   tool list, or none);
//! * the functions: `raise_exception(msg)` (surfaces as [`ChatTemplateError::Raised`]),
//!   `strftime_now(fmt)` (current UTC time) and a `tojson` filter that writes JSON the way
//!   Python's `json.dumps(..., ensure_ascii=False)` does (`", "`/`": "` separators, keys in
//!   insertion order, optional `indent`).

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

const TEMPLATE_NAME: &str = "chat";

/// One chat turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The turn's text; `None` for an assistant turn that only calls tools (templates see
    /// `none`, as with transformers).
    pub content: Option<String>,
    /// An assistant turn's tool calls, in OpenAI's shape (`id`, `type`, `function` with `name`
    /// and `arguments`); templates expect `arguments` as an object, not a JSON string.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool_calls: Option<serde_json::Value>,
    /// A `tool` turn: the id of the call it answers.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool_call_id: Option<String>,
    /// A `tool` turn: the function's name (some templates print it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: Some(content.into()),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }
}

/// Errors compiling or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template source does not parse.
    #[error("invalid chat template: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`, usually to reject the conversation
    /// (for example roles that do not alternate).
    #[error("{0}")]
    Raised(String),
    /// Any other rendering failure.
    #[error("rendering the chat template failed: {0}")]
    Render(String),
    /// The render ran more than [`RENDER_FUEL`] template instructions (a runaway loop).
    #[error("the chat template ran more than {RENDER_FUEL} instructions")]
    OutOfFuel,
    /// The rendered prompt grew past [`MAX_RENDERED_BYTES`].
    #[error("the rendered chat template exceeds {MAX_RENDERED_BYTES} bytes")]
    TooLarge,
    /// A template keyword argument tried to replace a variable the server sets.
    #[error("chat_template_kwargs may not set `{0}` (the server sets it)")]
    ReservedKwarg(String),
}

/// Extra variables a request hands the template (`chat_template_kwargs`, e.g.
/// `{"enable_thinking": false}`), as transformers' `apply_chat_template(**kwargs)` does.
pub type TemplateKwargs = serde_json::Map<String, serde_json::Value>;

/// The variables the server itself sets; kwargs may not replace them.
const RESERVED_VARIABLES: [&str; 5] = [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// Most template instructions one render may run. Real chat templates run a few hundred per
/// message, so this admits conversations far beyond any request size limit while stopping a
/// template whose loops never end (or run for hours) within a fraction of a second.
pub const RENDER_FUEL: u64 = 10_000_000;

/// Longest rendered prompt, in bytes: far above any prompt a model takes, and a bound on what a
/// template that repeats its output can allocate.
pub const MAX_RENDERED_BYTES: usize = 64 << 20;

/// Widest `tojson(indent=...)`, in spaces (Python accepts any; nothing real uses more than 8).
pub const MAX_TOJSON_INDENT: usize = 64;

/// The payload `raise_exception` attaches to its error so `render` can tell it apart.
#[derive(Debug)]
struct RaisedException(String);

impl std::fmt::Display for RaisedException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedException {}

/// A compiled chat template with its BOS/EOS strings.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    /// Whether the template reads `tool_calls`; templates that do not expect every `content`
    /// to be text, so a tool-calling turn's missing content reaches them as `""`.
    tool_aware: bool,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source`. `bos_token`/`eos_token` are exposed to the template as text (empty when
    /// the model has none).
    pub fn new(
        source: &str,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_fuel(Some(RENDER_FUEL));
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            tool_aware: source.contains("tool_calls"),
            bos_token: bos_token.unwrap_or_default().to_string(),
            eos_token: eos_token.unwrap_or_default().to_string(),
        })
    }

    /// The template's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages`; with `add_generation_prompt`, the template appends the header that
    /// starts the assistant's turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// [`render`](Self::render) with the request's tools (OpenAI's `tools` list:
    /// `{"type": "function", "function": {name, description, parameters}}` items), which the
    /// template receives as `tools`, as transformers passes them.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        self.render_with_kwargs(messages, tools, None, add_generation_prompt)
    }

    /// [`render_with_tools`](Self::render_with_tools) with the request's extra template
    /// variables (`kwargs`); a kwarg naming a variable the server sets is refused.
    pub fn render_with_kwargs(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        kwargs: Option<&TemplateKwargs>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        if let Some(key) = kwargs
            .into_iter()
            .flat_map(|k| k.keys())
            .find(|k| RESERVED_VARIABLES.contains(&k.as_str()))
        {
            return Err(ChatTemplateError::ReservedKwarg(key.clone()));
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Render(describe(&e)))?;
        let messages = if self.tool_aware {
            Value::from_serialize(messages)
        } else {
            Value::from_serialize(messages.iter().map(with_text_content).collect::<Vec<_>>())
        };
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => tools.map_or(Value::from(()), Value::from_serialize),
            ..kwargs.map_or(Value::from(()), Value::from_serialize)
        };
        let mut out = LimitedOutput::default();
        // minijinja 2.24 panics on some slices (a negative step over an empty string or list:
        // `''[::-1]`), which a template can meet with a user's empty content. Such a panic is
        // turned into a render error; `out` is dropped with the failed render.
        let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            template.render_captured_to(ctx, &mut out)
        }))
        .map_err(|payload| ChatTemplateError::Render(panic_message(payload.as_ref())))?;
        rendered.map_err(|e| match out.overflowed {
            true => ChatTemplateError::TooLarge,
            false => classify(e),
        })?;
        String::from_utf8(out.bytes).map_err(|e| ChatTemplateError::Render(e.to_string()))
    }
}

/// What a panic inside the template engine said, for the render error.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown failure".into());
    format!("the template engine failed ({what})")
}

/// A render's output, refusing to grow past [`MAX_RENDERED_BYTES`].
#[derive(Default)]
struct LimitedOutput {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for LimitedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_RENDERED_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("rendered chat template too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `message` with a missing `content` given as empty text, for templates that concatenate it.
fn with_text_content(message: &ChatMessage) -> std::borrow::Cow<'_, ChatMessage> {
    if message.content.is_some() {
        return std::borrow::Cow::Borrowed(message);
    }
    let mut owned = message.clone();
    owned.content = Some(String::new());
    std::borrow::Cow::Owned(owned)
}

/// Maps a render error to `Raised` when it came from `raise_exception`, and to `OutOfFuel`.
fn classify(err: Error) -> ChatTemplateError {
    if err.kind() == ErrorKind::OutOfFuel {
        return ChatTemplateError::OutOfFuel;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<RaisedException>() {
            return ChatTemplateError::Raised(raised.0.clone());
        }
        source = e.source();
    }
    ChatTemplateError::Render(describe(&err))
}

/// The error with its template line, when minijinja knows it.
fn describe(err: &Error) -> String {
    match err.line() {
        Some(line) => format!("{err} (line {line})"),
        None => err.to_string(),
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedException(message)))
}

/// `strftime_now(format)`: the current UTC time in C `strftime` notation.
fn strftime_now(format: String) -> Result<String, Error> {
    let mut out = String::new();
    write!(out, "{}", chrono::Utc::now().format(&format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("invalid strftime format {format:?}"),
        )
    })?;
    Ok(out)
}

/// `tojson` as HF's template environment defines it: Python `json.dumps` output.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let _ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    if indent.is_some_and(|n| n > MAX_TOJSON_INDENT) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: indent is limited to {MAX_TOJSON_INDENT}"),
        ));
    }
    let mut buf = Vec::new();
    let result = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let fmt = serde_json::ser::PrettyFormatter::with_indent(&pad);
            value.serialize(&mut serde_json::Serializer::with_formatter(&mut buf, fmt))
        }
        None => value.serialize(&mut serde_json::Serializer::with_formatter(
            &mut buf,
            PythonCompact,
        )),
    };
    result.map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let text = String::from_utf8(buf)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(Value::from_safe_string(text))
}

/// `json.dumps`' default separators: `", "` between items and `": "` after keys.
struct PythonCompact;

impl serde_json::ser::Formatter for PythonCompact {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}
