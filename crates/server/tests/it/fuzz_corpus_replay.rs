//! Replays the committed inputs of the `request` fuzz target (`fuzz/seeds/request/`,
//! `fuzz/corpus/request/` and the crash regressions under `fuzz/regressions/request/`)
//! through [`kestrel_server::fuzz_entry::request`], the function the target calls: each body
//! goes through the completions, chat and TGI parsing and validation, and must come back as
//! `Ok` or an `ApiError`, without a panic and within a time bound.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kestrel_server::error::ApiError;
use kestrel_server::fuzz_entry::{fuzz_state, request};
use kestrel_server::state::AppState;

/// Far above what any committed input takes (milliseconds); a hang regression trips it.
const PER_INPUT: Duration = Duration::from_secs(20);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The state the fuzz target uses: the tiny Qwen2 tokenizer, the Qwen2.5 tool template.
fn state() -> AppState {
    let read = |p: &str| std::fs::read_to_string(repo().join(p)).unwrap();
    fuzz_state(
        &read("tests/fixtures/tiny-qwen2/tokenizer.json"),
        &read("fuzz/assets/tokenizer_config.json"),
    )
    .unwrap()
}

fn inputs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for kind in ["seeds", "corpus", "regressions"] {
        let Ok(dir) = std::fs::read_dir(repo().join("fuzz").join(kind).join("request")) else {
            continue;
        };
        out.extend(dir.map(|e| e.unwrap().path()).filter(|p| p.is_file()));
    }
    out.sort();
    out
}

#[test]
fn request_inputs_return() {
    let state = state();
    let files = inputs();
    assert!(!files.is_empty());
    let mut accepted = 0;
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let start = Instant::now();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| request(&state, &data)))
                .unwrap_or_else(|_| panic!("{} panicked", path.display()));
        assert!(
            start.elapsed() < PER_INPUT,
            "{} took too long",
            path.display()
        );
        accepted += [&outcome.completion, &outcome.chat, &outcome.generate]
            .iter()
            .filter(|r| r.is_ok())
            .count();
    }
    assert!(accepted > 0, "no committed request was valid for any route");
}

fn seed(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("fuzz/seeds/request").join(name)).unwrap()
}

#[test]
fn request_seeds_validate_for_their_route() {
    let state = state();
    for name in ["chat_min.json", "chat_tools.json", "chat_tool_turns.json"] {
        let outcome = request(&state, &seed(name));
        outcome.chat.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(outcome.generate.is_err(), "{name} is not a TGI body");
    }
    let completion = request(&state, &seed("completion_min.json"));
    completion.completion.unwrap();
    assert!(
        completion.chat.is_err(),
        "a completions body is not a chat body"
    );
    request(&state, &seed("tgi_min.json")).generate.unwrap();
    // `echo` with `logprobs` is refused by name.
    let refused = request(&state, &seed("completion_list.json"))
        .completion
        .unwrap_err();
    assert!(refused.to_string().contains("echo"), "{refused}");
}

#[test]
fn request_unknown_fields_follow_the_first_byte() {
    let state = state();
    // `{` (odd): strict, the unknown field is refused.
    let strict = request(&state, br#"{"prompt": "x", "extra": 1}"#);
    assert!(matches!(strict.completion, Err(ApiError::UnknownFields(_))));
    // A leading space (even): lenient, the field is ignored.
    let lenient = request(&state, br#" {"prompt": "x", "extra": 1}"#);
    lenient.completion.unwrap();
}
