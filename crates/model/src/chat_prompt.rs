//! Chat prompts as token ids, with message content kept as text.
//!
//! The template's own markup (`<|im_start|>`, `<|im_end|>`, ...) becomes control tokens, but the
//! text of a message never does: a user who writes `<|im_end|>\n<|im_start|>system` in a message
//! gets those characters as ordinary BPE pieces and cannot forge a turn.
//!
//! Content without special-token text is encoded exactly as before (the whole rendered prompt in
//! one pass). When some content has such text, the template is rendered a second time with that
//! content replaced by unique placeholders; the placeholder rendering splits the prompt into
//! markup and content segments, checked by substituting the content back (which must give the
//! real rendering exactly). Markup segments are encoded normally, content segments with
//! [`Tokenizer::encode_as_text`]. A template that transforms such content (so the segments
//! cannot be proven) is refused, as are special-token strings in roles, names and call ids.

use crate::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError, TemplateKwargs};
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Why a chat prompt could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ChatPromptError {
    /// Rendering the template failed.
    #[error(transparent)]
    Template(#[from] ChatTemplateError),
    /// Tokenizing the rendered prompt failed.
    #[error("cannot tokenize: {0}")]
    Tokenize(#[from] TokenizerError),
    /// A message field other than `content` holds special-token text.
    #[error("the message field `{0}` must not contain special-token text")]
    SpecialTextInField(&'static str),
    /// The template changes message content that holds special-token text, so the content
    /// cannot be told apart from the markup.
    #[error(
        "message content contains special-token text and this chat template alters the \
         content, so it cannot be kept as plain text"
    )]
    ContentNotIsolated,
}

/// One stretch of the rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSegment {
    /// Template markup (and content without special-token text): special tokens are matched.
    Markup(String),
    /// Message content: encoded as plain text.
    Content(String),
}

/// The prompt's token ids (no BOS/EOS beyond what the template writes).
pub fn encode_chat(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
    kwargs: Option<&TemplateKwargs>,
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ChatPromptError> {
    let segments = chat_segments(
        template,
        tokenizer,
        messages,
        tools,
        kwargs,
        add_generation_prompt,
    )?;
    let mut ids = Vec::new();
    for segment in &segments {
        match segment {
            PromptSegment::Markup(text) => ids.extend(tokenizer.encode(text, false)?),
            PromptSegment::Content(text) => ids.extend(tokenizer.encode_as_text(text)?),
        }
    }
    Ok(ids)
}

/// The rendered prompt split into markup and content segments.
pub fn chat_segments(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
    kwargs: Option<&TemplateKwargs>,
    add_generation_prompt: bool,
) -> Result<Vec<PromptSegment>, ChatPromptError> {
    check_fields(tokenizer, messages, tools)?;
    let rendered = template.render_with_kwargs(messages, tools, kwargs, add_generation_prompt)?;
    let marked: Vec<bool> = messages
        .iter()
        .map(|m| {
            m.content
                .as_deref()
                .is_some_and(|c| tokenizer.contains_special_text(c))
        })
        .collect();
    if !marked.contains(&true) {
        return Ok(vec![PromptSegment::Markup(rendered)]);
    }
    let marker = Marker::new();
    let stand_ins: Vec<ChatMessage> = messages
        .iter()
        .zip(&marked)
        .enumerate()
        .map(|(i, (m, &hide))| {
            let mut m = m.clone();
            if hide {
                m.content = Some(marker.placeholder(i));
            }
            m
        })
        .collect();
    let skeleton = template.render_with_kwargs(&stand_ins, tools, kwargs, add_generation_prompt)?;
    let segments = marker.split(&skeleton, messages, &marked)?;
    let rebuilt: String = segments.iter().map(PromptSegment::text).collect();
    if rebuilt != rendered {
        return Err(ChatPromptError::ContentNotIsolated);
    }
    Ok(segments)
}

impl PromptSegment {
    fn text(&self) -> &str {
        match self {
            PromptSegment::Markup(t) | PromptSegment::Content(t) => t,
        }
    }
}

/// Roles, names, tool-call ids, tool calls and tool definitions are written into markup, so
/// they may not carry control text.
fn check_fields(
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
) -> Result<(), ChatPromptError> {
    let json_has_special = |v: &serde_json::Value| tokenizer.contains_special_text(&v.to_string());
    if tools.is_some_and(|t| t.iter().any(json_has_special)) {
        return Err(ChatPromptError::SpecialTextInField("tools"));
    }
    if messages
        .iter()
        .any(|m| m.tool_calls.as_ref().is_some_and(json_has_special))
    {
        return Err(ChatPromptError::SpecialTextInField("tool_calls"));
    }
    for m in messages {
        let fields = [
            ("role", Some(m.role.as_str())),
            ("name", m.name.as_deref()),
            ("tool_call_id", m.tool_call_id.as_deref()),
        ];
        for (field, value) in fields {
            if value.is_some_and(|v| tokenizer.contains_special_text(v)) {
                return Err(ChatPromptError::SpecialTextInField(field));
            }
        }
    }
    Ok(())
}

/// Placeholders unique to one rendering: private-use delimiters around a random nonce.
struct Marker {
    prefix: String,
}

const DELIM: char = '\u{F8FF}';

impl Marker {
    fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // RandomState's keys are random per process and differ between instances.
        let nonce = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Marker {
            prefix: format!("{DELIM}kestrel-content-{nonce:016x}-"),
        }
    }

    fn placeholder(&self, index: usize) -> String {
        format!("{}{index}{DELIM}", self.prefix)
    }

    /// Splits `skeleton` at the placeholders; each marked message's placeholder must occur
    /// exactly once.
    fn split(
        &self,
        skeleton: &str,
        messages: &[ChatMessage],
        marked: &[bool],
    ) -> Result<Vec<PromptSegment>, ChatPromptError> {
        let mut seen = vec![0usize; messages.len()];
        let mut segments = Vec::new();
        let mut rest = skeleton;
        while let Some(at) = rest.find(&self.prefix) {
            segments.push(PromptSegment::Markup(rest[..at].to_string()));
            let after = &rest[at + self.prefix.len()..];
            let end = after
                .find(DELIM)
                .ok_or(ChatPromptError::ContentNotIsolated)?;
            let index: usize = after[..end]
                .parse()
                .map_err(|_| ChatPromptError::ContentNotIsolated)?;
            let content = messages
                .get(index)
                .filter(|_| marked.get(index) == Some(&true))
                .and_then(|m| m.content.clone())
                .ok_or(ChatPromptError::ContentNotIsolated)?;
            seen[index] += 1;
            segments.push(PromptSegment::Content(content));
            rest = &after[end + DELIM.len_utf8()..];
        }
        segments.push(PromptSegment::Markup(rest.to_string()));
        let all_once = seen.iter().zip(marked).all(|(&n, &m)| !m || n == 1);
        if all_once {
            Ok(segments)
        } else {
            Err(ChatPromptError::ContentNotIsolated)
        }
    }
}
