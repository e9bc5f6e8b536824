//! The default model's tokenizer against HF goldens (tests/fixtures/tokenizer/smollm2.json,
//! written by scripts/gen_tokenizer_goldens.py). Needs KESTREL_DEFAULT_MODEL.

use crate::tokenizer_common;

use kestrel_engine::output::IncrementalDecoder;
use kestrel_model::tokenizer::Tokenizer;
use kestrel_model::weights::gguf::GgufFile;
use serde_json::Value;
use tokenizer_common::{default_model_path, fixture, FileMeta};

fn smollm2() -> Tokenizer {
    let path = default_model_path();
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    Tokenizer::from_gguf_metadata(&FileMeta(&file)).expect("tokenizer from GGUF")
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn text_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("fixture field {key}"))
}

#[test]
fn encode_matches_hf_ids_and_decode_round_trips() {
    let tk = smollm2();
    let fx = fixture();
    let cases = fx["cases"].as_array().expect("cases");
    assert!(cases.len() >= 25);
    for case in cases {
        let text = text_of(case, "text");
        let ids = tk.encode(text, false).expect("encode");
        assert_eq!(ids, ids_of(&case["ids"]), "ids for {text:?}");
        assert_eq!(
            tk.decode(&ids, false),
            text_of(case, "decoded"),
            "decode of {text:?}"
        );
        assert_eq!(tk.decode(&ids, false), text, "round trip of {text:?}");
        assert_eq!(tk.decode(&ids, true), text_of(case, "decoded_skip_special"));
    }
}

#[test]
fn rendered_chat_prompts_encode_like_hf() {
    let tk = smollm2();
    for chat in fixture()["chats"].as_array().expect("chats") {
        let rendered = text_of(chat, "rendered");
        assert_eq!(
            tk.encode(rendered, false).expect("encode"),
            ids_of(&chat["ids"])
        );
        // add_bos_token is false for SmolLM2: add_special changes nothing.
        assert_eq!(
            tk.encode(rendered, true).expect("encode"),
            ids_of(&chat["ids"])
        );
    }
}

#[test]
fn special_ids_vocab_and_template() {
    let tk = smollm2();
    let fx = fixture();
    assert_eq!(
        tk.vocab_size(),
        fx["vocab_size"].as_u64().expect("size") as usize
    );
    assert_eq!(tk.bos_token().as_deref(), fx["bos_token"].as_str());
    assert_eq!(tk.eos_token().as_deref(), fx["eos_token"].as_str());
    assert_eq!(tk.bos_id(), Some(1));
    // <|im_end|> (EOS) first, then <|endoftext|>.
    assert_eq!(tk.eos_ids(), &[2, 0]);
    assert_eq!(tk.chat_template(), fx["chat_template"].as_str());
}

#[test]
fn streaming_decode_equals_full_decode() {
    let tk = smollm2();
    for case in fixture()["cases"].as_array().expect("cases") {
        let ids = ids_of(&case["ids"]);
        let mut dec = IncrementalDecoder::new();
        let mut streamed = String::new();
        for &id in &ids {
            let chunk = dec.push(&tk, id);
            assert!(
                !chunk.contains('\u{FFFD}'),
                "broken char streamed for {:?}",
                case["text"]
            );
            streamed.push_str(&chunk);
        }
        streamed.push_str(&dec.flush(&tk));
        assert_eq!(
            streamed,
            tk.decode(&ids, true),
            "stream of {:?}",
            case["text"]
        );
    }
}
