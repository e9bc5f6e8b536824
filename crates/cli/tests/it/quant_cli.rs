//! `kestrel quantize`, `kestrel convert` and `kestrel ppl` end to end on the tiny F32 fixture.

use crate::cli_common;

use cli_common::*;

use std::path::PathBuf;

fn number_after(text: &str, key: &str) -> f64 {
    let rest = &text[text
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} in {text}"))
        + key.len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn quantize_convert_and_ppl_on_tiny_model() {
    let tiny =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-llama-f32");
    let dir = std::env::temp_dir().join(format!("kestrel-quant-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (q8, hf, base) = (dir.join("q8.gguf"), dir.join("hf"), dir.join("base.lp"));
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let out = kestrel(&[
        "quantize",
        tiny.to_str().unwrap(),
        &s(&q8),
        "--method",
        "q8_0",
    ]);
    stdout_of(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Q8_0:"),
        "per-type summary"
    );
    stdout_of(&kestrel(&[
        "convert",
        &s(&q8),
        &s(&hf),
        "--to",
        "safetensors",
        "--dtype",
        "bf16",
    ]));
    assert!(hf.join("model.safetensors").is_file() && hf.join("tokenizer.json").is_file());
    let text = dir.join("text.txt");
    let words =
        "the cat sat on the mat and the dog ran to the park where children played all day long ";
    std::fs::write(&text, words.repeat(40)).unwrap();
    let ppl_args = |model: &str, extra: &[&str]| {
        let mut a = vec![
            "ppl".to_string(),
            model.to_string(),
            "--text".into(),
            s(&text),
            "--ctx".into(),
            "64".into(),
            "--chunks".into(),
            "3".into(),
        ];
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let run =
        |a: Vec<String>| stdout_of(&kestrel(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let base_out = run(ppl_args(
        tiny.to_str().unwrap(),
        &["--save-logits", &s(&base)],
    ));
    let ppl = number_after(&base_out, "PPL =");
    assert!(
        ppl.is_finite() && ppl > 1.0,
        "random-weight tiny model: PPL must be finite and above 1, got {ppl}"
    );
    let same = run(ppl_args(
        tiny.to_str().unwrap(),
        &["--batch", "16", "--kl-divergence", &s(&base)],
    ));
    assert!(number_after(&same, "mean KLD =") < 1e-4, "{same}");
    assert_eq!(number_after(&same, "same top-1 ="), 100.0, "{same}");
    let quant = run(ppl_args(&s(&q8), &["--kl-divergence", &s(&base)]));
    assert!(number_after(&quant, "mean KLD =") < 0.05, "{quant}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn toolkit_methods_from_the_command_line() {
    let tiny =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-llama-f32");
    let dir = std::env::temp_dir().join(format!("kestrel-toolkit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let calib = dir.join("calib.txt");
    std::fs::write(
        &calib,
        "a few words of calibration text, over and over; ".repeat(60),
    )
    .unwrap();
    let (tiny, calib) = (tiny.to_str().unwrap(), calib.to_str().unwrap());
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "gptq.gguf",
            &[
                "--method",
                "gptq",
                "--act-order",
                "--group",
                "32",
                "--calib",
                calib,
                "--calib-tokens",
                "128",
                "--calib-ctx",
                "64",
            ],
            "INT4_G32:",
        ),
        (
            "awq.gguf",
            &[
                "--method",
                "awq",
                "--calib",
                calib,
                "--calib-tokens",
                "128",
                "--calib-ctx",
                "64",
            ],
            "INT4_G64:",
        ),
        ("int8.gguf", &["--method", "int8"], "INT8:"),
        (
            // Outlier channels (F16 weights beside INT8) after SmoothQuant.
            "int8-calib.gguf",
            &[
                "--method",
                "int8",
                "--calib",
                calib,
                "--calib-tokens",
                "128",
                "--calib-ctx",
                "64",
                "--smooth-alpha",
                "auto",
            ],
            "F16:",
        ),
        (
            "nf4.gguf",
            &["--method", "nf4", "--double-quant"],
            "NF4_DQ:",
        ),
    ];
    for (file, args, summary) in cases {
        let out_path = dir.join(file);
        let mut a = vec!["quantize", tiny, out_path.to_str().unwrap()];
        a.extend_from_slice(args);
        let out = kestrel(&a);
        stdout_of(&out);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(summary),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let gen = kestrel(&[
            "generate",
            "--model",
            out_path.to_str().unwrap(),
            "-n",
            "4",
            "hello",
        ]);
        stdout_of(&gen);
    }
    // Clear errors for what cannot work.
    let out_path = dir.join("x.gguf");
    let x = out_path.to_str().unwrap();
    for (args, message) in [
        (vec!["quantize", tiny, x, "--method", "awq"], "--calib"),
        (
            vec!["quantize", tiny, x, "--method", "int4", "--group", "100"],
            "group size 100",
        ),
        (
            vec!["quantize", tiny, x, "--method", "int3"],
            "unknown quantization method",
        ),
        (
            vec![
                "quantize", tiny, x, "--method", "gptq", "--bits", "3", "--calib", calib,
            ],
            "bits 3",
        ),
        (
            vec![
                "quantize",
                tiny,
                x,
                "--method",
                "int8",
                "--calib",
                calib,
                "--smooth-alpha",
                "1.5",
            ],
            "expected off, auto or an alpha",
        ),
    ] {
        let out = kestrel(&args);
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
