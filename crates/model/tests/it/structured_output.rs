//! Constrained decoding on the real default model (SmolLM2-135M-Instruct Q4_1) and its
//! tokenizer: the grammar masks allow exactly the tokens that keep the text inside the
//! grammar, and greedy runs under a JSON schema, a regex and a choice produce text that
//! satisfies them, alone and batched with free requests (whose output the constrained
//! neighbours do not change).
//!
//! Needs `KESTREL_DEFAULT_MODEL` (the suite's script sets it); fails without it.

use std::path::PathBuf;
use std::sync::Arc;

use kestrel_engine::api::{EngineEvent, EngineRequest};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::constraint::{ConstraintError, ConstraintFactory, GrammarSpec};
use kestrel_engine::handle::{EngineHandle, EngineOptions, ResponseStream};
use kestrel_engine::request::FinishReason;
use kestrel_engine::sampling::SamplingParams;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::tokenizer::Tokenizer;
use kestrel_model::{load_model, ModelRunner};
use serde_json::{json, Value};

fn model_path() -> PathBuf {
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: point it at the SmolLM2-135M-Instruct Q4_1 GGUF (scripts/test.sh sets it)",
    );
    PathBuf::from(path)
}

fn tokenizer() -> Tokenizer {
    let path = model_path();
    load_model(&path)
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
        .tokenizer
}

/// A fresh engine with structured output over the default model, and its tokenizer.
fn engine() -> (EngineHandle, Arc<Tokenizer>) {
    let path = model_path();
    let loaded = load_model(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
    let tokenizer = Arc::new(loaded.tokenizer);
    let runner = ModelRunner::new(loaded.model, 16, 512, ThreadPool::global());
    let width = kestrel_engine::executor::Executor::vocab_size(&runner);
    let factory = tokenizer
        .constraint_factory(width)
        .expect("token environment");
    let config = EngineConfig {
        max_num_seqs: 16,
        max_num_batched_tokens: 4096,
        enable_prefix_caching: true,
        max_model_len: 2048,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let eos = tokenizer.eos_ids().to_vec();
    let options = EngineOptions {
        speculator: None,
        constraints: Some(factory),
        ..EngineOptions::default()
    };
    let handle =
        EngineHandle::try_start_with(Box::new(runner), tokenizer.clone(), eos, config, options)
            .expect("engine starts");
    (handle, tokenizer)
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "pet": {"enum": ["cat", "dog", "fish"]}
        },
        "required": ["name", "age", "pet"],
        "additionalProperties": false
    })
}

fn chat_prompt(tokenizer: &Tokenizer, user: &str) -> Vec<u32> {
    let text = format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
    tokenizer.encode(&text, false).expect("encodes")
}

fn request(engine: &EngineHandle, prompt: Vec<u32>, grammar: Option<GrammarSpec>) -> EngineRequest {
    let sampling = SamplingParams {
        temperature: 0.0,
        max_tokens: 96,
        ..SamplingParams::default()
    };
    EngineRequest::new(prompt, sampling, &engine.limits())
        .expect("a valid request")
        .with_grammar(grammar)
}

/// Text and finish reason of a request that must finish normally.
fn run(mut stream: ResponseStream) -> (String, FinishReason) {
    let mut text = String::new();
    while let Some(ev) = stream.blocking_next() {
        match ev {
            EngineEvent::Token(t) => text.push_str(&t.text),
            EngineEvent::Finished {
                reason, text: tail, ..
            } => {
                text.push_str(&tail);
                return (text, reason);
            }
            EngineEvent::Failed(f) => panic!("request failed: {f}"),
        }
    }
    panic!("stream ended without a terminal event");
}

/// Waits (at most 10 s) until the engine's published counters show no request left.
fn wait_idle(engine: &EngineHandle) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let stats = engine.stats();
        if stats.running + stats.waiting == 0 && stats.kv_usage == 0.0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "requests left behind: {stats:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Checks `value` against `person_schema` by hand.
fn assert_person(value: &Value) {
    let obj = value.as_object().expect("an object");
    assert_eq!(obj.len(), 3, "exactly the three properties: {value}");
    let name = obj["name"].as_str().expect("name is a string");
    assert!(name.chars().count() <= 20, "name too long: {name:?}");
    let age = obj["age"].as_i64().expect("age is an integer");
    assert!((0..=150).contains(&age), "age out of range: {age}");
    let pet = obj["pet"].as_str().expect("pet is a string");
    assert!(
        ["cat", "dog", "fish"].contains(&pet),
        "pet not in the enum: {pet}"
    );
}

/// Whether some match of `(yes|no), [0-9]{2}` starts with `piece`.
fn starts_a_match(piece: &str) -> bool {
    ["yes, ", "no, "].iter().any(|head| {
        if piece.len() <= head.len() {
            head.starts_with(piece)
        } else {
            let rest = &piece[head.len()..];
            piece.starts_with(head) && rest.len() <= 2 && rest.chars().all(|c| c.is_ascii_digit())
        }
    })
}

#[test]
fn masks_allow_exactly_the_valid_continuations() {
    let tok = tokenizer();
    let width = tok.vocab_size();
    let factory = tok.constraint_factory(width).expect("factory");
    let mut matcher = factory
        .compile(&GrammarSpec::Regex {
            pattern: "(yes|no), [0-9]{2}".into(),
        })
        .expect("compiles");
    // At the start, every allowed token's text is a prefix of some match, and the tokens for
    // "yes", "no", "y" and "n" are among them.
    let allowed = matcher.allowed_tokens().expect("mask");
    assert!(!allowed.is_empty());
    for &id in &allowed {
        let piece = tok.decode(&[id], false);
        assert!(
            starts_a_match(&piece),
            "token {id} ({piece:?}) cannot start a match"
        );
    }
    for word in ["yes", "no", "y", "n"] {
        let id = tok.piece_to_id(word).expect("in the vocabulary");
        assert!(allowed.contains(&id), "{word:?} must be allowed");
    }
    let forbidden = tok
        .piece_to_id("maybe")
        .or_else(|| tok.piece_to_id("the"))
        .expect("a word");
    assert!(!allowed.contains(&forbidden));
    // The mask sets every disallowed logit to -inf and keeps the allowed ones.
    let mut row = vec![0.5f32; width];
    let mut probe = factory
        .compile(&GrammarSpec::Regex {
            pattern: "(yes|no), [0-9]{2}".into(),
        })
        .expect("compiles");
    probe.apply(&mut row).expect("mask applies");
    let finite: Vec<u32> = (0..width as u32)
        .filter(|&i| row[i as usize].is_finite())
        .collect();
    assert_eq!(finite, allowed);
    // Walk "no, 42": after each token only continuations remain; at the end only EOS.
    let ids = tok.encode("no, 42", false).expect("encodes");
    for &id in &ids {
        assert!(matcher.allowed_tokens().expect("mask").contains(&id));
        matcher.consume(id).expect("consumes");
    }
    assert!(matcher.is_finished(), "the regex is complete");
    let end = matcher.allowed_tokens().expect("mask");
    assert!(!end.is_empty());
    assert!(
        end.iter().all(|id| tok.eos_ids().contains(id)),
        "only end-of-generation tokens after completion: {end:?}"
    );
    // A disallowed token is refused by the matcher.
    let mut fresh = factory
        .compile(&GrammarSpec::Choice {
            choices: vec!["alpha".into(), "beta".into()],
        })
        .expect("compiles");
    assert!(fresh.consume(forbidden).is_err());
}

#[test]
fn bad_grammars_are_typed_errors() {
    let tok = tokenizer();
    let factory: Arc<ConstraintFactory> =
        tok.constraint_factory(tok.vocab_size()).expect("factory");
    let bad = [
        GrammarSpec::Regex {
            pattern: "(unclosed".into(),
        },
        GrammarSpec::JsonSchema {
            schema: json!({"type": "no-such-type"}),
        },
        GrammarSpec::JsonSchema { schema: json!(42) },
        GrammarSpec::Choice { choices: vec![] },
        GrammarSpec::Lark {
            grammar: "start: undefined_rule".into(),
        },
    ];
    for spec in bad {
        match factory.validate(&spec) {
            Err(ConstraintError::Invalid { kind, message }) => {
                assert_eq!(kind, spec.kind());
                assert!(!message.is_empty());
            }
            other => panic!("{spec:?} must be invalid, got {other:?}"),
        }
    }
    factory
        .validate(&GrammarSpec::JsonSchema {
            schema: person_schema(),
        })
        .expect("a good schema compiles");
}

#[test]
fn greedy_constrained_outputs_satisfy_their_grammars_beside_free_requests() {
    let (engine, tok) = engine();
    let free_prompt = chat_prompt(&tok, "Tell me about lighthouses.");
    let alone = run(engine
        .submit(request(&engine, free_prompt.clone(), None))
        .expect("submits"));

    let json_prompt = chat_prompt(
        &tok,
        "Describe a person with a name, an age and a pet as JSON.",
    );
    let regex = r"[A-Z][a-z]{1,15} [0-9]{1,3}";
    let choices = vec![
        "positive".to_string(),
        "negative".to_string(),
        "neutral".to_string(),
    ];
    let streams = vec![
        engine.submit(request(&engine, free_prompt.clone(), None)),
        engine.submit(request(
            &engine,
            json_prompt.clone(),
            Some(GrammarSpec::JsonSchema {
                schema: person_schema(),
            }),
        )),
        engine.submit(request(&engine, json_prompt, Some(GrammarSpec::JsonObject))),
        engine.submit(request(
            &engine,
            chat_prompt(&tok, "Name a city and its age."),
            Some(GrammarSpec::Regex {
                pattern: regex.into(),
            }),
        )),
        engine.submit(request(
            &engine,
            chat_prompt(&tok, "Is 'I love it' positive or negative?"),
            Some(GrammarSpec::Choice {
                choices: choices.clone(),
            }),
        )),
    ];
    let outs: Vec<(String, FinishReason)> = streams
        .into_iter()
        .map(|s| run(s.expect("submits")))
        .collect();

    assert_eq!(
        outs[0], alone,
        "a free request is unchanged by constrained neighbours"
    );

    let (text, reason) = &outs[1];
    assert_eq!(
        *reason,
        FinishReason::Stop,
        "the schema completes: {text:?}"
    );
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert_person(&value);

    let (text, reason) = &outs[2];
    assert_eq!(*reason, FinishReason::Stop, "{text:?}");
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(value.is_object(), "{text:?}");

    let (text, reason) = &outs[3];
    assert_eq!(*reason, FinishReason::Stop, "{text:?}");
    let (word, number) = text.split_once(' ').expect("two parts");
    assert!(
        word.chars().next().is_some_and(|c| c.is_ascii_uppercase()),
        "{text:?}"
    );
    assert!(
        word.chars().skip(1).all(|c| c.is_ascii_lowercase()) && word.len() >= 2,
        "{text:?}"
    );
    assert!(
        (1..=3).contains(&number.len()) && number.chars().all(|c| c.is_ascii_digit()),
        "{text:?}"
    );

    let (text, reason) = &outs[4];
    assert_eq!(*reason, FinishReason::Stop);
    assert!(choices.contains(text), "{text:?} is not a choice");

    wait_idle(&engine);
}

#[test]
fn a_grammar_failing_in_the_engine_fails_its_request_alone() {
    let (engine, tok) = engine();
    let prompt = chat_prompt(&tok, "Say something.");
    // Submitted without the server's check, a grammar that does not compile fails its request
    // when the engine admits it; a free request beside it finishes.
    let bad = engine
        .submit(request(
            &engine,
            prompt.clone(),
            Some(GrammarSpec::Regex {
                pattern: "(unclosed".into(),
            }),
        ))
        .expect("submits");
    let free = engine
        .submit(request(&engine, prompt.clone(), None))
        .expect("submits");
    let mut bad = bad;
    match bad.blocking_next() {
        Some(EngineEvent::Failed(f)) => {
            let message = f.to_string();
            assert!(message.contains("structured output"), "{message}");
            assert!(message.contains("regex"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let (text, _) = run(free);
    assert!(!text.is_empty());
    // An engine started without a grammar compiler refuses constrained requests the same way,
    // and its handle says so before submitting.
    let path = model_path();
    let loaded = load_model(&path).expect("loads");
    let runner = ModelRunner::new(loaded.model, 16, 64, ThreadPool::global());
    let plain = EngineHandle::start(
        Box::new(runner),
        tok.clone(),
        tok.eos_ids().to_vec(),
        EngineConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 1024,
            enable_prefix_caching: false,
            max_model_len: 1024,
            max_concurrent_requests: None,
            lora: Default::default(),
        },
    );
    let spec = GrammarSpec::JsonObject;
    assert_eq!(
        plain.validate_grammar(&spec),
        Err(ConstraintError::Unavailable)
    );
    let mut refused = plain
        .submit(request(&plain, prompt, Some(spec)))
        .expect("submits");
    assert!(matches!(
        refused.blocking_next(),
        Some(EngineEvent::Failed(_))
    ));
    wait_idle(&engine);
}
