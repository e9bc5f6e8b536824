//! Chat templates rendered like HF's `apply_chat_template` (goldens in
//! tests/fixtures/tokenizer/smollm2.json; no model file needed).

use crate::tokenizer_common;

use kestrel_model::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
use serde_json::Value;
use tokenizer_common::fixture;

fn messages(v: &Value) -> Vec<ChatMessage> {
    v.as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            ChatMessage::new(
                m["role"].as_str().expect("role"),
                m["content"].as_str().expect("content"),
            )
        })
        .collect()
}

fn template(source: &str, fx: &Value) -> ChatTemplate {
    ChatTemplate::new(source, fx["bos_token"].as_str(), fx["eos_token"].as_str())
        .expect("template compiles")
}

#[test]
fn smollm2_template_matches_hf() {
    let fx = fixture();
    let tpl = template(fx["chat_template"].as_str().expect("template"), &fx);
    let chats = fx["chats"].as_array().expect("chats");
    assert_eq!(chats.len(), 3);
    for chat in chats {
        let add = chat["add_generation_prompt"].as_bool().expect("flag");
        let got = tpl
            .render(&messages(&chat["messages"]), add)
            .expect("render");
        assert_eq!(got, chat["rendered"].as_str().expect("rendered"));
    }
}

#[test]
fn extra_templates_match_hf_including_raised_errors() {
    let fx = fixture();
    let cases = fx["templates"].as_array().expect("templates");
    assert_eq!(cases.len(), 4);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let tpl = template(case["template"].as_str().expect("source"), &fx);
        let add = case["add_generation_prompt"].as_bool().expect("flag");
        let result = tpl.render(&messages(&case["messages"]), add);
        match (case["rendered"].as_str(), case["error"].as_str()) {
            (Some(want), _) => assert_eq!(result.expect(name), want, "{name}"),
            (None, Some(msg)) => match result {
                Err(ChatTemplateError::Raised(got)) => assert_eq!(got, msg, "{name}"),
                other => panic!("{name}: expected raise_exception({msg:?}), got {other:?}"),
            },
            (None, None) => panic!("{name}: fixture has neither output nor error"),
        }
    }
}

#[test]
fn raise_exception_message_is_the_error_text() {
    let tpl = ChatTemplate::new(
        "{% if messages|length == 0 %}{{ raise_exception('need at least one message') }}{% endif %}ok",
        None,
        None,
    )
    .expect("compiles");
    let err = tpl.render(&[], false).expect_err("raises");
    assert!(matches!(&err, ChatTemplateError::Raised(m) if m == "need at least one message"));
    assert_eq!(err.to_string(), "need at least one message");
    assert_eq!(
        tpl.render(&[ChatMessage::new("user", "x")], false)
            .expect("render"),
        "ok"
    );
}

#[test]
fn strftime_now_formats_the_current_date() {
    let tpl = ChatTemplate::new("Today is {{ strftime_now('%Y-%m-%d') }}.", None, None)
        .expect("compiles");
    let out = tpl.render(&[], false).expect("render");
    let date = out
        .strip_prefix("Today is ")
        .and_then(|s| s.strip_suffix('.'))
        .expect("shape");
    let parts: Vec<&str> = date.split('-').collect();
    assert_eq!(parts.len(), 3, "{out}");
    let year: u32 = parts[0].parse().expect("year");
    assert!(year >= 2024, "{out}");
    assert_eq!((parts[1].len(), parts[2].len()), (2, 2), "{out}");
}

#[test]
fn tools_is_none_and_tokens_default_to_empty() {
    let tpl = ChatTemplate::new(
        "{% if tools is none %}no tools{% endif %}[{{ bos_token }}|{{ eos_token }}]",
        None,
        None,
    )
    .expect("compiles");
    assert_eq!(tpl.render(&[], true).expect("render"), "no tools[|]");
}

#[test]
fn syntax_and_render_errors_are_typed() {
    let bad = ChatTemplate::new("{% for m in messages %}", None, None);
    assert!(matches!(bad, Err(ChatTemplateError::Syntax(_))));
    let tpl = ChatTemplate::new("{{ messages[0].content.nosuchmethod() }}", None, None)
        .expect("compiles");
    let err = tpl
        .render(&[ChatMessage::new("user", "x")], false)
        .expect_err("unknown method");
    assert!(matches!(err, ChatTemplateError::Render(_)), "{err:?}");
}
