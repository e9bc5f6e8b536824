//! Chat templates of tool-calling models rendered with tools and tool turns, compared with
//! transformers' rendering (goldens in tests/fixtures/chat_templates/tools.json, written by
//! scripts/goldens/tool_templates.py).

use std::path::PathBuf;

use kestrel_model::chat_template::{ChatMessage, ChatTemplate};
use serde_json::Value;

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/chat_templates/tools.json");
    let text = std::fs::read_to_string(&path).expect("tools.json fixture");
    serde_json::from_str(&text).expect("fixture parses")
}

#[test]
fn tool_templates_match_transformers() {
    let fx = fixture();
    let tools = fx["tools"].as_array().expect("tools").clone();
    let templates = fx["templates"].as_array().expect("templates");
    assert_eq!(
        templates.len(),
        5,
        "qwen2.5, qwen3, hermes3, llama3.1, mistral-nemo"
    );
    for t in templates {
        let name = t["name"].as_str().expect("name");
        let tpl = ChatTemplate::new(
            t["template"].as_str().expect("source"),
            t["bos_token"].as_str(),
            t["eos_token"].as_str(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        for case in t["cases"].as_array().expect("cases") {
            let case_name = case["name"].as_str().expect("case name");
            let messages: Vec<ChatMessage> =
                serde_json::from_value(case["messages"].clone()).expect("messages");
            let got = tpl
                .render_with_tools(&messages, Some(&tools), true)
                .unwrap_or_else(|e| panic!("{name}/{case_name}: {e}"));
            assert_eq!(
                got,
                case["rendered"].as_str().expect("rendered"),
                "{name}/{case_name}"
            );
        }
    }
}

#[test]
fn without_tools_the_template_sees_none() {
    let tpl = ChatTemplate::new(
        "{% if tools is none %}no tools{% else %}{{ tools|length }} tools{% endif %}",
        None,
        None,
    )
    .expect("compiles");
    let msgs = [ChatMessage::new("user", "hi")];
    assert_eq!(tpl.render(&msgs, false).expect("render"), "no tools");
    let tools = [serde_json::json!({"type": "function", "function": {"name": "f"}})];
    assert_eq!(
        tpl.render_with_tools(&msgs, Some(&tools), false)
            .expect("render"),
        "1 tools"
    );
}

#[test]
fn templates_without_tool_support_see_missing_content_as_empty_text() {
    let mut call = ChatMessage::new("assistant", "");
    call.content = None;
    call.tool_calls = Some(serde_json::json!([{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": {}}}]));
    let msgs = [ChatMessage::new("user", "hi"), call];

    let plain = ChatTemplate::new(
        "{% for m in messages %}{{ m.role + ': ' + m.content + ';' }}{% endfor %}",
        None,
        None,
    )
    .expect("compiles");
    assert_eq!(
        plain.render(&msgs, false).expect("render"),
        "user: hi;assistant: ;"
    );

    let aware = ChatTemplate::new(
        "{% for m in messages %}{{ m.role }}={{ m.content is none }}\
         {% if m.tool_calls %}+calls{% endif %};{% endfor %}",
        None,
        None,
    )
    .expect("compiles");
    assert_eq!(
        aware.render(&msgs, false).expect("render"),
        "user=False;assistant=True+calls;"
    );
}
