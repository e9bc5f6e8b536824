//! Kestrel's own chat templates, by the names `--chat-template NAME` takes: a family's
//! built-in template (Gemma's, for model files that carry none) and the common ChatML format.

/// `(name, template source)` for every built-in template.
const TEMPLATES: &[(&str, &str)] = &[
    ("chatml", include_str!("templates/chatml.jinja")),
    ("gemma", include_str!("templates/gemma.jinja")),
];

/// The built-in template called `name`.
pub fn named(name: &str) -> Option<&'static str> {
    TEMPLATES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, source)| *source)
}

/// The built-in templates' names, comma-separated (for errors and help).
pub fn names() -> String {
    TEMPLATES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat_template::{ChatMessage, ChatTemplate};

    #[test]
    fn every_named_template_renders_a_conversation() {
        let turns = [
            ChatMessage::new("system", "be brief"),
            ChatMessage::new("user", "hi"),
        ];
        for (name, source) in TEMPLATES {
            let t = ChatTemplate::new(source, Some("<s>"), Some("</s>")).expect(name);
            let text = t.render(&turns, true).expect(name);
            assert!(
                text.contains("be brief") && text.contains("hi"),
                "{name}: {text}"
            );
        }
        assert!(named("chatml").is_some() && named("nope").is_none());
        assert_eq!(names(), "chatml, gemma");
    }
}
