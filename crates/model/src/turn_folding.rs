//! [`fold_turns`]: a conversation reshaped for templates that accept only the classic form —
//! at most one leading system message, then user and assistant turns that alternate.
//!
//! Agents' APIs send conversations such templates refuse: Codex sends several `developer`
//! messages in a row, Claude Code a `system` message after the user's turn, and both send tool
//! results to models whose template has no tool role (Gemma's raises on anything but
//! alternating user/model turns). Folding keeps every word and its order:
//!
//! * the leading run of `system` / `developer` messages becomes one system message;
//! * a later `system` / `developer` message, and a `tool` result, become user text;
//! * an assistant turn's tool calls become assistant text (one JSON object per call);
//! * consecutive turns of the same role are joined into one, paragraphs apart.

use crate::chat_template::ChatMessage;

/// Roles that address the model as instructions.
fn is_instruction(role: &str) -> bool {
    matches!(role, "system" | "developer")
}

/// `turns` folded into a leading system message and alternating user/assistant turns.
pub fn fold_turns(turns: &[ChatMessage]) -> Vec<ChatMessage> {
    let lead = turns.iter().take_while(|t| is_instruction(&t.role)).count();
    let mut out: Vec<ChatMessage> = Vec::with_capacity(turns.len());
    if lead > 0 {
        let system = join(turns[..lead].iter().map(text_of));
        out.push(ChatMessage::new("system", system));
    }
    for turn in &turns[lead..] {
        let role = match turn.role.as_str() {
            "assistant" => "assistant",
            _ => "user",
        };
        push_joined(&mut out, role, text_of(turn));
    }
    out
}

/// Appends `text` as a `role` turn, joined to the last turn when it has the same role (the
/// system message is never joined: folded turns are only `user` and `assistant`).
fn push_joined(out: &mut Vec<ChatMessage>, role: &str, text: String) {
    match out.last_mut().filter(|last| last.role == role) {
        Some(last) => {
            let joined = join([last.content.take().unwrap_or_default(), text].into_iter());
            last.content = Some(joined);
        }
        None => out.push(ChatMessage::new(role, text)),
    }
}

/// A turn's words as plain text: its content, then its tool calls or the call it answers.
fn text_of(turn: &ChatMessage) -> String {
    let content = turn.content.clone().unwrap_or_default();
    if turn.role == "tool" {
        let id = turn.tool_call_id.as_deref().or(turn.name.as_deref());
        return match id {
            Some(id) => format!("Tool result ({id}):\n{content}"),
            None => format!("Tool result:\n{content}"),
        };
    }
    let calls = turn
        .tool_calls
        .as_ref()
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .map(|call| call.get("function").unwrap_or(call).to_string());
    join(std::iter::once(content).chain(calls))
}

/// Non-empty pieces, a blank line apart.
fn join(pieces: impl Iterator<Item = String>) -> String {
    pieces
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, text: &str) -> ChatMessage {
        ChatMessage::new(role, text)
    }

    fn shape(turns: &[ChatMessage]) -> Vec<(String, String)> {
        turns
            .iter()
            .map(|t| (t.role.clone(), t.content.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn leading_instructions_become_one_system_message() {
        let turns = [m("developer", "a"), m("system", "b"), m("user", "c")];
        let folded = shape(&fold_turns(&turns));
        assert_eq!(
            folded,
            [
                ("system".into(), "a\n\nb".into()),
                ("user".into(), "c".into())
            ]
        );
    }

    #[test]
    fn consecutive_user_turns_and_a_late_system_message_join_one_user_turn() {
        let turns = [m("user", "hi"), m("user", "there"), m("system", "be brief")];
        let folded = shape(&fold_turns(&turns));
        assert_eq!(folded, [("user".into(), "hi\n\nthere\n\nbe brief".into())]);
    }

    #[test]
    fn tool_calls_and_results_become_text_in_alternating_turns() {
        let call = serde_json::json!([{"id": "c1", "type": "function",
            "function": {"name": "ls", "arguments": {"path": "."}}}]);
        let assistant = ChatMessage {
            content: None,
            tool_calls: Some(call),
            ..m("assistant", "")
        };
        let tool = ChatMessage {
            tool_call_id: Some("c1".into()),
            ..m("tool", "a.txt")
        };
        let turns = [m("user", "list"), assistant, tool, m("user", "thanks")];
        let folded = shape(&fold_turns(&turns));
        assert_eq!(folded.len(), 3);
        assert_eq!(folded[1].0, "assistant");
        assert!(folded[1].1.contains("\"name\":\"ls\""), "{folded:?}");
        assert_eq!(folded[2].0, "user");
        assert_eq!(folded[2].1, "Tool result (c1):\na.txt\n\nthanks");
    }

    #[test]
    fn a_conversation_already_in_shape_is_unchanged() {
        let turns = [
            m("system", "s"),
            m("user", "u"),
            m("assistant", "a"),
            m("user", "v"),
        ];
        assert_eq!(shape(&fold_turns(&turns)), shape(&turns));
    }
}
