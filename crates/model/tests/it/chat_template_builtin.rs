//! A family's built-in chat template: Gemma's turn format, rendered by Kestrel's own template
//! (families/templates/gemma.jinja), and used for the real Gemma 3 270M GGUF, whose file carries
//! no template. The expected text is Gemma's documented prompt format: `<start_of_turn>user` /
//! `<start_of_turn>model` turns closed by `<end_of_turn>`, a system message put before the
//! first user turn, the BOS token first.

use crate::common;

use kestrel_model::chat_template::{ChatMessage, ChatTemplate};
use kestrel_model::families;

fn gemma_template() -> ChatTemplate {
    let source = families::by_name("gemma3")
        .and_then(|a| a.builtin_chat_template())
        .expect("gemma3 has a built-in template");
    ChatTemplate::new(source, Some("<bos>"), Some("<eos>")).expect("compiles")
}

#[test]
fn gemma_builtin_template_renders_gemma_turns() {
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello! "),
        ChatMessage::new("user", "Name a colour."),
    ];
    let text = gemma_template().render(&messages, true).unwrap();
    assert_eq!(
        text,
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
         <start_of_turn>model\nHello!<end_of_turn>\n\
         <start_of_turn>user\nName a colour.<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    let no_prompt = gemma_template()
        .render(&[ChatMessage::new("user", "Hi")], false)
        .unwrap();
    assert_eq!(no_prompt, "<bos><start_of_turn>user\nHi<end_of_turn>\n");
}

#[test]
fn gemma_builtin_template_refuses_turns_out_of_order() {
    let err = gemma_template()
        .render(&[ChatMessage::new("assistant", "first")], true)
        .expect_err("an assistant turn first is refused");
    assert!(err.to_string().contains("alternate"), "{err}");
}

#[test]
fn families_without_a_builtin_template_have_none() {
    for name in ["llama", "qwen2", "bloom"] {
        let arch = families::by_name(name).unwrap();
        assert!(arch.builtin_chat_template().is_none(), "{name}");
    }
}

/// The real Gemma 3 270M GGUF has no `tokenizer.chat_template`: the loader gives it Gemma's,
/// and the tokenizer carries it (so a fleet gateway, which sees only the tokenizer, agrees).
#[test]
fn gemma3_270m_without_a_template_in_its_file_gets_gemmas() {
    let path = std::env::var_os("KESTREL_GEMMA3_270M").expect(
        "KESTREL_GEMMA3_270M is not set: run the suite with scripts/test.sh, or set it to the path scripts/fetch_gemma3_270m.sh prints",
    );
    let loaded = common::load(std::path::Path::new(&path));
    let template = loaded.chat_template.as_ref().expect("a chat template");
    assert_eq!(
        Some(template.source()),
        families::by_name("gemma3").unwrap().builtin_chat_template()
    );
    assert_eq!(loaded.tokenizer.chat_template(), Some(template.source()));
    let text = template
        .render(&[ChatMessage::new("user", "Hi")], true)
        .unwrap();
    assert_eq!(
        text,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    );
}
