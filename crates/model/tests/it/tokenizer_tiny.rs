//! Tokenizers built from tiny in-memory GGUF metadata: byte-level BPE with each pre-tokenizer
//! family, SentencePiece-style BPE with byte fallback, special tokens, BOS/EOS and errors.

use crate::tokenizer_common;

use kestrel_engine::output::IncrementalDecoder;
use kestrel_model::tokenizer::{keys, Tokenizer, TokenizerError};
use tokenizer_common::{byte_chars, MapMeta, Val};

const SPECIALS: [&str; 2] = ["<|endoftext|>", "<|im_end|>"];

/// Byte-level vocabulary: two control tokens, the 256 byte characters, then merge results.
fn byte_level_meta(pre: Option<&str>) -> MapMeta {
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ t", "Ġt he", "1 2", "3 4", "12 34", "12 3",
    ];
    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    tokens.extend(byte_chars().iter().map(|c| c.to_string()));
    tokens.extend(merges.iter().map(|m| m.replace(' ', "")));
    let mut types = vec![3, 3];
    types.resize(tokens.len(), 1);
    let mut meta = MapMeta::default();
    meta.set(keys::MODEL, Val::Str("gpt2".into()))
        .set(keys::TOKENS, Val::Strs(tokens))
        .set(keys::TOKEN_TYPE, Val::I32s(types))
        .set(
            keys::MERGES,
            Val::Strs(merges.iter().map(|m| m.to_string()).collect()),
        )
        .set(keys::BOS_ID, Val::U32(0))
        .set(keys::EOS_ID, Val::U32(1))
        .set(keys::ADD_BOS, Val::Bool(false))
        .set(keys::CHAT_TEMPLATE, Val::Str("{{ messages }}".into()));
    if let Some(pre) = pre {
        meta.set(keys::PRE, Val::Str(pre.into()));
    }
    meta
}

fn build(meta: &MapMeta) -> Tokenizer {
    Tokenizer::from_gguf_metadata(meta).expect("tokenizer builds")
}

fn id(tk: &Tokenizer, piece: &str) -> u32 {
    tk.piece_to_id(piece)
        .unwrap_or_else(|| panic!("{piece:?} in vocab"))
}

#[test]
fn byte_level_merges_words_and_maps_spaces() {
    let tk = build(&byte_level_meta(Some("gpt2")));
    let ids = tk.encode("hello the", false).expect("encode");
    assert_eq!(ids, vec![id(&tk, "hello"), id(&tk, "Ġthe")]);
    assert_eq!(tk.decode(&ids, false), "hello the");
    assert_eq!(tk.token_to_piece(ids[1]).as_deref(), Some("Ġthe"));
    assert_eq!(tk.vocab_size(), 2 + 256 + 10);
    assert_eq!(tk.chat_template(), Some("{{ messages }}"));
}

#[test]
fn pre_tokenizer_family_decides_digit_splits() {
    let digits = |pre: &str| {
        let tk = build(&byte_level_meta(Some(pre)));
        let ids = tk.encode("1234", false).expect("encode");
        ids.iter()
            .map(|&i| tk.token_to_piece(i).expect("piece"))
            .collect::<Vec<_>>()
    };
    assert_eq!(digits("gpt2"), vec!["1234"]);
    assert_eq!(digits("smollm"), vec!["1", "2", "3", "4"]);
    assert_eq!(digits("qwen2"), vec!["1", "2", "3", "4"]);
    assert_eq!(digits("llama-bpe"), vec!["123", "4"]);
    assert_eq!(digits("default"), digits("gpt2"));
}

#[test]
fn missing_pre_key_means_gpt2_split() {
    let tk = build(&byte_level_meta(None));
    assert_eq!(
        tk.encode("1234", false).expect("encode"),
        vec![id(&tk, "1234")]
    );
}

#[test]
fn special_tokens_in_text_are_single_ids_and_skippable() {
    let tk = build(&byte_level_meta(Some("smollm")));
    let ids = tk.encode("hello<|im_end|>the", false).expect("encode");
    assert_eq!(ids[0], id(&tk, "hello"));
    assert_eq!(ids[1], 1);
    assert_eq!(tk.decode(&ids, false), "hello<|im_end|>the");
    assert_eq!(tk.decode(&ids, true), "hellothe");
    assert_eq!(tk.bos_id(), Some(0));
    assert_eq!(tk.eos_id(), Some(1));
    assert_eq!(tk.eos_ids(), &[1, 0]);
    assert_eq!(tk.bos_token().as_deref(), Some("<|endoftext|>"));
    assert_eq!(tk.eos_token().as_deref(), Some("<|im_end|>"));
}

#[test]
fn add_special_follows_add_bos_and_add_eos() {
    let mut meta = byte_level_meta(Some("gpt2"));
    let plain = build(&meta).encode("hello", true).expect("encode");
    assert_eq!(plain.len(), 1, "add_bos_token=false adds nothing");
    meta.set(keys::ADD_BOS, Val::Bool(true))
        .set(keys::ADD_EOS, Val::Bool(true));
    let tk = build(&meta);
    let ids = tk.encode("hello", true).expect("encode");
    assert_eq!(ids, vec![0, id(&tk, "hello"), 1]);
    assert_eq!(
        tk.encode("hello", false).expect("encode"),
        vec![id(&tk, "hello")]
    );
}

#[test]
fn utf8_round_trips_through_byte_tokens() {
    let tk = build(&byte_level_meta(Some("smollm")));
    for text in [
        "大模型推理优化",
        "emoji 🦀🎉 ok",
        "tabs\t\tand\n\nnewlines  ",
        "x =  5",
    ] {
        let ids = tk.encode(text, false).expect("encode");
        assert_eq!(tk.decode(&ids, false), text);
    }
}

#[test]
fn incremental_decoding_waits_for_whole_characters() {
    let tk = build(&byte_level_meta(Some("gpt2")));
    let ids = tk.encode("a🦀", false).expect("encode");
    assert_eq!(ids.len(), 5, "one byte token for 'a' and four for the crab");
    let mut dec = IncrementalDecoder::new();
    let chunks: Vec<String> = ids.iter().map(|&i| dec.push(&tk, i)).collect();
    assert_eq!(chunks, vec!["a", "", "", "", "🦀"]);
}

/// SentencePiece-style vocabulary with scores; merges come from the scores.
fn spm_meta(space_prefix: bool) -> MapMeta {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let pieces = [
        "▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "he", "ll", "▁he", "llo", "▁hello", "▁w",
        "or", "▁wor", "ld", "▁world", "hello",
    ];
    let mut scores = vec![0.0f32; tokens.len()];
    for (i, p) in pieces.iter().enumerate() {
        tokens.push(p.to_string());
        types.push(1);
        // Longer pieces score higher, so they are merged first.
        scores.push(p.chars().count() as f32 * 10.0 + i as f32 * 0.01);
    }
    let mut meta = MapMeta::default();
    meta.set(keys::MODEL, Val::Str("llama".into()))
        .set(keys::TOKENS, Val::Strs(tokens))
        .set(keys::TOKEN_TYPE, Val::I32s(types))
        .set(keys::SCORES, Val::F32s(scores))
        .set(keys::BOS_ID, Val::U32(1))
        .set(keys::EOS_ID, Val::U32(2))
        .set(keys::UNK_ID, Val::U32(0))
        .set(keys::ADD_SPACE_PREFIX, Val::Bool(space_prefix));
    meta
}

#[test]
fn sentencepiece_merges_by_score_with_space_prefix() {
    let tk = build(&spm_meta(true));
    let ids = tk.encode("hello world", false).expect("encode");
    assert_eq!(ids, vec![id(&tk, "▁hello"), id(&tk, "▁world")]);
    assert_eq!(tk.decode(&ids, false), "hello world");
    let lead = tk.encode(" hello", false).expect("encode");
    assert_eq!(lead, vec![id(&tk, "▁"), id(&tk, "▁hello")]);
    assert_eq!(tk.decode(&lead, false), " hello");
}

#[test]
fn sentencepiece_adds_bos_by_default_and_parses_controls() {
    let tk = build(&spm_meta(true));
    let ids = tk.encode("hello</s>", true).expect("encode");
    assert_eq!(ids, vec![1, id(&tk, "▁hello"), 2]);
    assert_eq!(tk.decode(&ids, true), "hello");
    assert_eq!(tk.eos_ids(), &[2]);
}

#[test]
fn sentencepiece_byte_fallback_for_unknown_characters() {
    let tk = build(&spm_meta(true));
    let ids = tk.encode("hello é", false).expect("encode");
    let bytes: Vec<String> = ids[2..]
        .iter()
        .map(|&i| tk.token_to_piece(i).expect("piece"))
        .collect();
    assert_eq!(bytes, vec!["<0xC3>", "<0xA9>"]);
    assert_eq!(ids[1], id(&tk, "▁"));
    assert_eq!(tk.decode(&ids, false), "hello é");
    assert_eq!(tk.decode(&ids[..3], false), "hello \u{FFFD}");
}

#[test]
fn sentencepiece_without_space_prefix() {
    let tk = build(&spm_meta(false));
    let ids = tk.encode("hello world", false).expect("encode");
    assert_eq!(ids, vec![id(&tk, "hello"), id(&tk, "▁world")]);
    assert_eq!(tk.decode(&ids, false), "hello world");
}

#[test]
fn invalid_metadata_is_reported() {
    let err = |meta: &MapMeta| Tokenizer::from_gguf_metadata(meta).expect_err("must fail");
    let mut m = byte_level_meta(Some("gpt2"));
    m.remove(keys::TOKENS);
    assert!(matches!(err(&m), TokenizerError::MissingKey(k) if k == keys::TOKENS));
    let mut m = byte_level_meta(Some("gpt2"));
    m.remove(keys::MERGES);
    assert!(matches!(err(&m), TokenizerError::MissingKey(k) if k == keys::MERGES));
    let mut m = byte_level_meta(Some("gpt2"));
    m.set(keys::MODEL, Val::Str("bert".into()));
    assert!(matches!(err(&m), TokenizerError::UnsupportedModel(s) if s == "bert"));
    let m = byte_level_meta(Some("unheard-of"));
    assert!(matches!(err(&m), TokenizerError::UnsupportedPreTokenizer(s) if s == "unheard-of"));
    let mut m = byte_level_meta(Some("gpt2"));
    m.set(keys::TOKEN_TYPE, Val::I32s(vec![1, 1]));
    assert!(matches!(
        err(&m),
        TokenizerError::LengthMismatch { got: 2, .. }
    ));
    let mut m = byte_level_meta(Some("gpt2"));
    m.set(keys::MERGES, Val::Strs(vec!["nospace".into()]));
    assert!(matches!(err(&m), TokenizerError::BadMerge { index: 0, .. }));
    let mut m = byte_level_meta(Some("gpt2"));
    m.set(keys::EOS_ID, Val::U32(100_000));
    assert!(matches!(
        err(&m),
        TokenizerError::IdOutOfRange { id: 100_000, .. }
    ));
    let mut m = spm_meta(true);
    m.remove(keys::SCORES);
    assert!(matches!(err(&m), TokenizerError::MissingKey(k) if k == keys::SCORES));
}

/// A tokenizer rebuilt from its spec (as the fleet's gateway does from a worker's descriptor)
/// encodes, decodes and names its special ids exactly as the original.
#[test]
fn a_tokenizer_rebuilt_from_its_spec_behaves_the_same() {
    let original = build(&byte_level_meta(Some("smollm")));
    let spec = original.to_spec().unwrap();
    let json = serde_json::to_string(&spec).unwrap();
    let rebuilt = Tokenizer::from_spec(&serde_json::from_str(&json).unwrap()).unwrap();
    for text in ["hello the 1234", "<|im_end|> hello\n\tthe", "ünïcödé 12 34"] {
        let ids = original.encode(text, true).unwrap();
        assert_eq!(rebuilt.encode(text, true).unwrap(), ids, "{text:?}");
        assert_eq!(rebuilt.decode(&ids, true), original.decode(&ids, true));
    }
    assert_eq!(rebuilt.bos_id(), original.bos_id());
    assert_eq!(rebuilt.eos_ids(), original.eos_ids());
    assert_eq!(rebuilt.chat_template(), original.chat_template());
    assert_eq!(rebuilt.vocab_size(), original.vocab_size());
}

#[test]
fn a_spec_with_an_id_outside_the_vocabulary_is_refused() {
    let mut spec = build(&byte_level_meta(None)).to_spec().unwrap();
    spec.eos = Some(1_000_000);
    assert!(matches!(
        Tokenizer::from_spec(&spec),
        Err(TokenizerError::IdOutOfRange { .. })
    ));
    spec.eos = None;
    spec.json = "{not json".into();
    assert!(Tokenizer::from_spec(&spec).is_err());
}
