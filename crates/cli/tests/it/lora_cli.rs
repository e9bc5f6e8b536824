//! `--lora` and `--merge-lora` end to end on the tiny F32 fixture and its PEFT adapter
//! (scripts/goldens/tiny_lora.py): generating with the adapter equals generating with the
//! merged model `convert --merge-lora` writes, and differs from the base; `ppl --lora` scores
//! like the merged model (the adapter itself is checked against PEFT in the model crate).

use crate::cli_common;

use cli_common::*;

use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn generate(model: &Path, lora: Option<&Path>) -> String {
    let mut args = vec![
        "generate",
        "--model",
        s(model),
        "Hello world! How are you",
        "-n",
        "16",
    ];
    if let Some(l) = lora {
        args.extend(["--lora", s(l)]);
    }
    stdout_of(&kestrel(&args))
}

fn ppl(model: &Path, text: &Path, lora: Option<&Path>) -> f64 {
    let mut args = vec![
        "ppl",
        s(model),
        "--text",
        s(text),
        "--ctx",
        "64",
        "--chunks",
        "2",
    ];
    if let Some(l) = lora {
        args.extend(["--lora", s(l)]);
    }
    let out = stdout_of(&kestrel(&args));
    let rest = &out[out.find("PPL =").expect("PPL line") + 5..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn lora_flags_agree_with_the_merged_model() {
    let tiny = fixtures().join("tiny-llama-f32");
    let all7 = fixtures().join("lora/all7");
    let dir = std::env::temp_dir().join(format!("kestrel-lora-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let merged = dir.join("merged.gguf");
    let out = kestrel(&[
        "convert",
        s(&tiny),
        s(&merged),
        "--to",
        "gguf",
        "--merge-lora",
        s(&all7),
    ]);
    stdout_of(&out);

    let with_lora = generate(&tiny, Some(&all7));
    assert_eq!(
        with_lora,
        generate(&merged, None),
        "--lora vs merged weights"
    );
    assert_ne!(
        with_lora,
        generate(&tiny, None),
        "the adapter changes the output"
    );
    let gguf_lora = generate(&tiny, Some(&fixtures().join("lora/all7.gguf")));
    assert_eq!(gguf_lora, with_lora, "the same adapter as a llama.cpp GGUF");

    let text = dir.join("text.txt");
    let words = "the cat sat on the mat and the dog ran to the park where children played ";
    std::fs::write(&text, words.repeat(30)).unwrap();
    let (base, lora, merged_ppl) = (
        ppl(&tiny, &text, None),
        ppl(&tiny, &text, Some(&all7)),
        ppl(&merged, &text, None),
    );
    eprintln!("PPL base {base}, --lora {lora}, merged {merged_ppl}");
    assert!(
        (lora - merged_ppl).abs() <= 1e-3 * merged_ppl,
        "{lora} vs {merged_ppl}"
    );
    assert!(
        (lora - base).abs() > 1e-2 * base,
        "the adapter changes PPL: {lora} vs {base}"
    );

    let bad = kestrel(&["generate", "--model", s(&tiny), "--lora", s(&dir), "hi"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot load LoRA adapter"));
    std::fs::remove_dir_all(&dir).unwrap();
}
