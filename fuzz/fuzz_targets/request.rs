//! Fuzz target: `kestrel_server::fuzz_entry::request`: one body through the completions, chat
//! and TGI generate parsing and validation, over the tiny Qwen2 test tokenizer with the
//! Qwen2.5 tool-calling chat template (`fuzz/assets/tokenizer_config.json`).
#![no_main]

use std::sync::LazyLock;

use kestrel_server::state::AppState;
use libfuzzer_sys::fuzz_target;

static STATE: LazyLock<AppState> = LazyLock::new(|| {
    kestrel_server::fuzz_entry::fuzz_state(
        include_str!("../../tests/fixtures/tiny-qwen2/tokenizer.json"),
        include_str!("../assets/tokenizer_config.json"),
    )
    .expect("the fuzzing state's tokenizer and template load")
});

fuzz_target!(|data: &[u8]| {
    // Ok or an ApiError are both fine; a panic, hang or huge allocation is a finding.
    let _ = kestrel_server::fuzz_entry::request(&STATE, data);
});
