//! Replays the committed fuzz inputs of the model's parsers (`fuzz/seeds/<target>/`,
//! `fuzz/corpus/<target>/` and the crash regressions under `fuzz/regressions/<target>/`)
//! through the entry points the fuzz targets call ([`kestrel_model::fuzz_entry`]): every input
//! must come back, as `Ok` or a typed error, without a panic and within a time bound.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kestrel_model::fuzz_entry;

/// Far above what any committed input takes (milliseconds); a hang regression trips it.
const PER_INPUT: Duration = Duration::from_secs(20);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every file of `target` in the seed, corpus and regression folders (missing folders are
/// empty), sorted.
fn inputs(target: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for kind in ["seeds", "corpus", "regressions"] {
        let Ok(dir) = std::fs::read_dir(fuzz_dir().join(kind).join(target)) else {
            continue;
        };
        out.extend(dir.map(|e| e.unwrap().path()).filter(|p| p.is_file()));
    }
    out.sort();
    out
}

/// Runs `entry` on every input of `target`; returns how many were accepted (`Ok`).
fn replay<T, E: std::fmt::Debug>(target: &str, entry: impl Fn(&[u8]) -> Result<T, E>) -> usize {
    let files = inputs(target);
    assert!(
        !files.is_empty(),
        "no committed inputs for fuzz target {target}"
    );
    let mut accepted = 0;
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let start = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| entry(&data)));
        let took = start.elapsed();
        let result = result.unwrap_or_else(|_| panic!("{} panicked", path.display()));
        assert!(took < PER_INPUT, "{} took {took:?}", path.display());
        accepted += usize::from(result.is_ok());
    }
    accepted
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    std::fs::read(fuzz_dir().join("seeds").join(target).join(name)).unwrap()
}

#[test]
fn gguf_inputs_return() {
    assert!(replay("gguf", fuzz_entry::gguf) > 0);
}

#[test]
fn gguf_seeds_load() {
    for name in ["llama_gpt2_v3.gguf", "llama_gpt2_v2.gguf", "llama_spm.gguf"] {
        fuzz_entry::gguf(&seed("gguf", name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn safetensors_inputs_return() {
    assert!(replay("safetensors", fuzz_entry::safetensors) > 0);
}

#[test]
fn safetensors_seeds_load_and_refuse() {
    for name in [
        "f32.safetensors",
        "mixed.safetensors",
        "bf16.safetensors",
        "empty.safetensors",
    ] {
        fuzz_entry::safetensors(&seed("safetensors", name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let err = fuzz_entry::safetensors(&seed("safetensors", "u8_unsupported.safetensors"));
    assert!(err.unwrap_err().to_string().contains("dtype"));
}

#[test]
fn hf_config_inputs_return() {
    assert!(replay("hf_config", fuzz_entry::hf_config) > 0);
}

#[test]
fn hf_config_seeds_parse() {
    let config = fuzz_entry::hf_config(&seed("hf_config", "tiny-qwen2.json")).unwrap();
    assert_eq!(config.architecture.name(), "qwen2");
    assert!(fuzz_entry::hf_config(&seed("hf_config", "qwen2_zero_heads.json")).is_err());
}

#[test]
fn tokenizer_json_inputs_return() {
    assert!(replay("tokenizer_json", fuzz_entry::tokenizer_json) > 0);
}

#[test]
fn tokenizer_json_seeds_load() {
    for name in ["tiny_bpe_bytelevel.json", "wordpiece.json", "unigram.json"] {
        fuzz_entry::tokenizer_json(&seed("tokenizer_json", name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn chat_template_inputs_return() {
    assert!(replay("chat_template", fuzz_entry::chat_template) > 0);
}

#[test]
fn chat_template_seeds_render() {
    for name in [
        "qwen2.5.txt",
        "hermes3.txt",
        "llama3.1.txt",
        "tojson.txt",
        "macro.txt",
    ] {
        fuzz_entry::chat_template(&seed("chat_template", name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let raised = fuzz_entry::chat_template(
        b"[{\"role\":\"system\",\"content\":\"x\"}]\n{{ raise_exception('no') }}",
    );
    assert_eq!(raised.unwrap_err().to_string(), "no");
}

fn regression(target: &str, name: &str) -> Vec<u8> {
    std::fs::read(fuzz_dir().join("regressions").join(target).join(name)).unwrap()
}

#[test]
fn absurd_layer_counts_are_refused_before_allocating() {
    for name in ["qwen2_window_1e15_layers.json", "mixtral_2e62_layers.json"] {
        let err = fuzz_entry::hf_config(&regression("hf_config", name)).unwrap_err();
        assert!(err.to_string().contains("layers; at most"), "{name}: {err}");
    }
    let err = fuzz_entry::gguf(&regression("gguf", "block_count_2e62_moe.gguf")).unwrap_err();
    assert!(err.to_string().contains("llama.block_count"), "{err}");
}

#[test]
fn runaway_templates_are_stopped() {
    use kestrel_model::chat_template::ChatTemplateError;
    let run = |name| fuzz_entry::chat_template(&regression("chat_template", name)).unwrap_err();
    assert!(matches!(
        run("nested_loops_1e10.txt"),
        ChatTemplateError::OutOfFuel
    ));
    assert!(matches!(
        run("output_10tb.txt"),
        ChatTemplateError::TooLarge
    ));
    let indent = run("tojson_huge_indent.txt");
    assert!(indent.to_string().contains("indent is limited"), "{indent}");
}

#[test]
fn template_engine_panics_are_render_errors() {
    use kestrel_model::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};
    // minijinja 2.24 indexes past the end when a negative-step slice meets an empty string
    // (found by the fuzzer as `strftime_now('')[::-1]`); a user's empty content can do it.
    let err = fuzz_entry::chat_template(&regression(
        "chat_template",
        "reverse_slice_of_empty_string.txt",
    ))
    .unwrap_err();
    assert!(matches!(err, ChatTemplateError::Render(_)), "{err}");
    let template = ChatTemplate::new(
        "{% for m in messages %}{{ m.content[::-1] }}{% endfor %}",
        None,
        None,
    )
    .unwrap();
    let say = |text: &str| vec![ChatMessage::new("user", text)];
    assert_eq!(template.render(&say("abc"), false).unwrap(), "cba");
    let err = template.render(&say(""), false).unwrap_err();
    assert!(
        err.to_string().contains("the template engine failed"),
        "{err}"
    );
}

/// The error of the `tokenizer_json` regression input `name`, which must be refused.
fn refused_tokenizer(name: &str) -> kestrel_model::tokenizer::TokenizerError {
    fuzz_entry::tokenizer_json(&regression("tokenizer_json", name)).unwrap_err()
}

#[test]
fn tokenizer_json_syntax_errors_inside_the_decoder_are_typed() {
    // `tokenizers` panics on this one (a syntax error inside the `decoder` value).
    let err = refused_tokenizer("decoder_json_syntax_error.json");
    assert!(err.to_string().contains("<memory>"), "{err}");
}

#[test]
fn tokenizer_json_invalid_escapes_anywhere_are_typed() {
    // A lone surrogate escape in a key inside `decoder`: skipping the value without decoding
    // its strings let it through to `tokenizers`, which panicked.
    let err = refused_tokenizer("lone_surrogate_in_decoder_key.json");
    assert!(err.to_string().contains("<memory>"), "{err}");
}

#[test]
fn tokenizer_json_strip_decoders_that_strip_from_the_end_are_refused() {
    // `{"type": "Strip", "content": " ", "start": 1, "stop": 4}`: tokenizers indexes before the
    // start of a token made only of spaces (an overflow, then an out-of-bounds index).
    let err = refused_tokenizer("strip_decoder_stop_past_token.json");
    assert!(
        err.to_string().contains("Strip decoder with stop 4"),
        "{err}"
    );
}

#[test]
fn tokenizer_json_replace_chains_that_multiply_text_are_refused() {
    // Replace steps turning each space into kilobytes that contain spaces again: encoding a
    // 60-byte text took 23 s and 8 GB before the loader bounded the chain's growth.
    let err = refused_tokenizer("replace_chain_growth.json");
    assert!(
        err.to_string().contains("Replace steps can multiply"),
        "{err}"
    );
}

#[test]
fn tokenizer_json_templates_naming_undefined_special_tokens_are_typed() {
    // `tokenizers` loads this one (its `[SEP]` entry was renamed by the fuzzer) and panics on
    // the first encode that adds special tokens.
    let err = refused_tokenizer("template_undefined_special_token.json");
    assert!(
        err.to_string()
            .contains("uses special token \"[SEP]\", which special_tokens does not define"),
        "{err}"
    );
    // The same with `"tyqe": "TemplateProcessing"`: tokenizers still loads it as a template.
    let err = refused_tokenizer("template_with_misspelt_type.json");
    assert!(
        err.to_string()
            .contains("which special_tokens does not define"),
        "{err}"
    );
}

#[test]
fn tokenizer_json_unigram_pieces_too_long_for_the_stack_are_refused() {
    // An untyped model whose vocabulary is `[piece, score]` pairs loads as Unigram; one piece of
    // 49 KB made `tokenizers`' byte trie 49,000 levels deep, and dropping it overflowed the
    // 2 MiB stack of a test thread.
    let err = refused_tokenizer("unigram_piece_of_49_kb.json");
    assert!(
        err.to_string().contains("vocabulary piece of 49256 bytes"),
        "{err}"
    );
}
