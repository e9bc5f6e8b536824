//! [`check_json`]: what `tokenizers` would panic on, refused while `tokenizer.json` loads.
//!
//! `tokenizers` 0.21 panics found by fuzzing: a JSON syntax error inside the `decoder` value
//! and an invalid string escape anywhere in it (its untagged decoder enum re-parses the value
//! and `expect`s success); a `TemplateProcessing` post-processor whose templates name special
//! tokens it does not define (deserialized without a check, then indexed on every encode that
//! adds special tokens); and a `Strip` decoder with `stop` > 0, which indexes before the start
//! of a token made only of its `content` character when decoding it. Its Unigram model keeps
//! pieces in a byte trie that it drops recursively, so one piece of 40 KB overflows a 2 MiB
//! thread stack. So the whole document is read once, decoding every string and key
//! ([`Checked`], which keeps nothing), and the `post_processor`, `decoder`, `normalizer` and
//! the length of the model's pieces are checked.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The parts of `tokenizer.json` checked here.
#[derive(Deserialize)]
struct Shape {
    #[serde(default)]
    post_processor: Option<Value>,
    #[serde(default)]
    decoder: Option<Value>,
    #[serde(default)]
    normalizer: Option<Value>,
    #[serde(default)]
    model: Option<ModelPieces>,
}

/// Most bytes one piece of a Unigram vocabulary may have. Real ones have a few dozen
/// (SentencePiece's default limit is 16 characters); each byte is one level of `tokenizers`'
/// trie, and dropping it takes stack per level.
const MAX_PIECE_BYTES: usize = 1024;

/// Most a chain of `Replace` steps may multiply a text's length by (see [`growth`]). Real
/// tokenizers replace a space with `▁` (1) or a byte with a short escape (a few).
const MAX_REPLACE_GROWTH: f64 = 64.0;

/// Any JSON value, read in full (every string decoded, escapes checked) and then dropped.
/// `serde::de::IgnoredAny` would skip strings without decoding their escapes.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

/// The byte length of the longest piece of the model's vocabulary when it has the Unigram
/// shape (`"vocab": [[piece, score], ...]`), read without keeping the vocabulary; 0 for any
/// other shape (which `tokenizers` judges).
struct ModelPieces(usize);

impl<'de> Deserialize<'de> for ModelPieces {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LongestPiece(Level::Model).deserialize(d).map(ModelPieces)
    }
}

/// Where [`LongestPiece`] is inside the model value.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Model,
    Vocab,
    Entry,
    Piece,
}

/// Reads a value at `Level` and returns the longest piece inside it; a value of any other
/// shape is read in full and counts 0.
struct LongestPiece(Level);

impl<'de> DeserializeSeed<'de> for LongestPiece {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LongestPiece {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_unit<E: de::Error>(self) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        Ok(if self.0 == Level::Piece { v.len() } else { 0 })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut longest = 0;
        match self.0 {
            Level::Vocab => {
                while let Some(n) = seq.next_element_seed(LongestPiece(Level::Entry))? {
                    longest = longest.max(n);
                }
            }
            Level::Entry => {
                longest = seq
                    .next_element_seed(LongestPiece(Level::Piece))?
                    .unwrap_or(0);
            }
            Level::Model | Level::Piece => {}
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(longest)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut longest = 0;
        while let Some(key) = map.next_key::<String>()? {
            if self.0 == Level::Model && key == "vocab" {
                longest = map.next_value_seed(LongestPiece(Level::Vocab))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(longest)
    }
}

/// Checks the JSON of `text` (syntax and every string) and its post-processor; the error says
/// what is wrong.
pub(super) fn check_json(text: &str) -> Result<(), String> {
    serde_json::from_str::<Checked>(text).map_err(|e| e.to_string())?;
    let shape: Shape = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if let Some(d) = &shape.decoder {
        check_decoder(d)?;
    }
    for (part, value) in [
        ("normalizer", &shape.normalizer),
        ("decoder", &shape.decoder),
    ] {
        let g = value.as_ref().map_or(1.0, growth);
        if g > MAX_REPLACE_GROWTH {
            return Err(format!(
                "{part}: its Replace steps can multiply a text's length by {g:.0} \
                 (at most {MAX_REPLACE_GROWTH} is supported)"
            ));
        }
    }
    let longest = shape.model.map_or(0, |m| m.0);
    if longest > MAX_PIECE_BYTES {
        return Err(format!(
            "model: a vocabulary piece of {longest} bytes (at most {MAX_PIECE_BYTES} are supported)"
        ));
    }
    match shape.post_processor {
        Some(p) => check_processor(&p),
        None => Ok(()),
    }
}

/// How many times longer (in characters) a normalizer or decoder chain can make a text
/// through its `Replace` steps: each replaces every match of its pattern (at least one
/// character for a string, taken as one for a regex) with its content, and the steps of a
/// `Sequence` apply one after another, so their factors multiply. A chain whose content
/// contains the next step's pattern grows exponentially (fuzzing found three steps turning a
/// 60-byte text into gigabytes).
fn growth(v: &Value) -> f64 {
    if let Some(steps) = v
        .get("normalizers")
        .or_else(|| v.get("decoders"))
        .and_then(Value::as_array)
    {
        return steps.iter().map(growth).product();
    }
    let (Some(pattern), Some(content)) = (v.get("pattern"), v.get("content")) else {
        return 1.0;
    };
    let content = content.as_str().map_or(1, |c| c.chars().count()) as f64;
    let matched = pattern
        .get("String")
        .and_then(Value::as_str)
        .map_or(1, |p| p.chars().count().max(1)) as f64;
    (content / matched).max(1.0)
}

/// A decoder, or a `Sequence` of them, recognized by shape as processors are: a `Strip` (an
/// object with `content`, `start` and `stop`) must have `stop` 0, which is what tokenizers
/// that strip use (a leading space: `start` 1).
fn check_decoder(d: &Value) -> Result<(), String> {
    if let Some(inner) = d.get("decoders").and_then(Value::as_array) {
        inner.iter().try_for_each(check_decoder)?;
    }
    let is_strip = ["content", "start", "stop"]
        .iter()
        .all(|k| d.get(k).is_some());
    let stop = d.get("stop").and_then(Value::as_u64);
    if is_strip && stop != Some(0) {
        return Err(format!(
            "decoder: a Strip decoder with stop {} is not supported (only 0)",
            d["stop"]
        ));
    }
    Ok(())
}

/// A post-processor, or a `Sequence` of them. Recognized by shape, not by its `type`:
/// `tokenizers` falls back to trying every processor kind when the tag does not match, so an
/// object with a misspelt `type` still loads as a template.
fn check_processor(p: &Value) -> Result<(), String> {
    if let Some(inner) = p.get("processors").and_then(Value::as_array) {
        inner.iter().try_for_each(check_processor)?;
    }
    if p.get("single").is_some() || p.get("pair").is_some() {
        check_template(p)?;
    }
    Ok(())
}

/// Every special token that `single` or `pair` names is defined in `special_tokens`, with as
/// many ids as tokens.
fn check_template(p: &Value) -> Result<(), String> {
    let defined = p.get("special_tokens").and_then(Value::as_object);
    for (key, token) in defined.into_iter().flatten() {
        let len = |field: &str| token.get(field).and_then(Value::as_array).map(Vec::len);
        if len("ids") != len("tokens") {
            return Err(format!(
                "post_processor: special token {key:?} has {} ids and {} tokens",
                len("ids").unwrap_or(0),
                len("tokens").unwrap_or(0)
            ));
        }
    }
    for template in ["single", "pair"] {
        let pieces = p.get(template).and_then(Value::as_array);
        let sequences: Vec<&str> = pieces
            .into_iter()
            .flatten()
            .filter_map(|piece| piece.pointer("/Sequence/id").and_then(Value::as_str))
            .collect();
        // One text is encoded as sequence A; a `single` template naming B indexes past it.
        if template == "single" && sequences.iter().any(|&id| id != "A") {
            return Err("post_processor: the single template may only use sequence A".into());
        }
        if template == "pair" && !(sequences.contains(&"A") && sequences.contains(&"B")) {
            return Err("post_processor: the pair template must use sequences A and B".into());
        }
        for piece in pieces.into_iter().flatten() {
            let Some(id) = piece.pointer("/SpecialToken/id").and_then(Value::as_str) else {
                continue;
            };
            if !defined.is_some_and(|d| d.contains_key(id)) {
                return Err(format!(
                    "post_processor: the {template} template uses special token {id:?}, \
                     which special_tokens does not define"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_post_processor(p: &str) -> String {
        format!(r#"{{"model": {{"type": "BPE"}}, "post_processor": {p}}}"#)
    }

    #[test]
    fn templates_must_name_defined_special_tokens() {
        let ok = r#"{"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}"#;
        check_json(&with_post_processor(ok)).unwrap();
        let missing = ok.replace(r#"{"<s>": {"#, r#"{"<x>": {"#);
        let err = check_json(&with_post_processor(&missing)).unwrap_err();
        assert!(
            err.contains("single template uses special token \"<s>\""),
            "{err}"
        );
        let nested = format!(
            r#"{{"type": "Sequence", "processors": [{{"type": "ByteLevel"}}, {missing}]}}"#
        );
        assert!(check_json(&with_post_processor(&nested)).is_err());
        let single_b = ok.replace(
            r#"{"Sequence": {"id": "A", "type_id": 0}}],
            "pair""#,
            r#"{"Sequence": {"id": "B", "type_id": 0}}],
            "pair""#,
        );
        let err = check_json(&with_post_processor(&single_b)).unwrap_err();
        assert!(
            err.contains("single template may only use sequence A"),
            "{err}"
        );
        let pair_a = ok.replace(r#""id": "B", "type_id": 1"#, r#""id": "A", "type_id": 1"#);
        let err = check_json(&with_post_processor(&pair_a)).unwrap_err();
        assert!(
            err.contains("pair template must use sequences A and B"),
            "{err}"
        );
        let misspelt = missing.replace("TemplateProcessing", "Anything");
        assert!(check_json(&with_post_processor(&misspelt)).is_err());
        let uneven = ok.replace(r#""ids": [1]"#, r#""ids": [1, 2]"#);
        let err = check_json(&with_post_processor(&uneven)).unwrap_err();
        assert!(err.contains("2 ids and 1 tokens"), "{err}");
    }

    #[test]
    fn other_processors_and_none_pass_and_bad_syntax_fails() {
        check_json(r#"{"model": {}}"#).unwrap();
        check_json(&with_post_processor("null")).unwrap();
        check_json(&with_post_processor(
            r#"{"type": "ByteLevel", "trim_offsets": false}"#,
        ))
        .unwrap();
        assert!(check_json(r#"{"model": {"#).is_err());
    }

    #[test]
    fn strip_decoders_must_not_strip_from_the_end() {
        let strip = |stop: &str| {
            format!(
                r#"{{"decoder": {{"type": "Sequence", "decoders": [{{"type": "Fuse"}},
                {{"type": "Strip", "content": " ", "start": 1, "stop": {stop}}}]}}}}"#
            )
        };
        check_json(&strip("0")).unwrap();
        let err = check_json(&strip("4")).unwrap_err();
        assert!(err.contains("Strip decoder with stop 4"), "{err}");
        assert!(check_json(&strip("-1")).is_err());
    }

    #[test]
    fn replace_chains_that_multiply_text_are_refused() {
        let replace = |content: &str| {
            format!(
                r#"{{"type": "Replace", "pattern": {{"String": " "}}, "content": "{content}"}}"#
            )
        };
        let chain = |steps: &[String]| {
            format!(
                r#"{{"normalizer": {{"type": "Sequence", "normalizers": [{{"type": "NFKC"}}, {}]}}}}"#,
                steps.join(", ")
            )
        };
        // Llama-style: a space becomes `▁`.
        check_json(&chain(&[replace("▁")])).unwrap();
        check_json(&chain(&[replace("    "), replace("    "), replace("    ")])).unwrap();
        let doubling = vec![replace("  "); 7];
        let err = check_json(&chain(&doubling)).unwrap_err();
        assert!(err.contains("multiply a text's length by 128"), "{err}");
        let long = replace(&"x ".repeat(100));
        assert!(check_json(&chain(std::slice::from_ref(&long))).is_err());
        let decoder = format!(r#"{{"decoder": {long}}}"#);
        let err = check_json(&decoder).unwrap_err();
        assert!(err.starts_with("decoder:"), "{err}");
    }

    #[test]
    fn unigram_pieces_longer_than_the_bound_are_refused() {
        let unigram = |piece: &str| {
            format!(
                r#"{{"model": {{"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["{piece}", -1.5]]}}}}"#
            )
        };
        check_json(&unigram(&"a".repeat(MAX_PIECE_BYTES))).unwrap();
        let err = check_json(&unigram(&"a".repeat(MAX_PIECE_BYTES + 1))).unwrap_err();
        assert!(err.contains("vocabulary piece of 1025 bytes"), "{err}");
        // Recognized by shape: `tokenizers` takes an untyped model with this vocabulary as Unigram.
        let untyped = unigram(&"é".repeat(600)).replace(r#""type": "Unigram", "#, "");
        assert!(check_json(&untyped).is_err());
        // A BPE vocabulary (a map) is not a trie; its long keys are fine.
        let bpe = format!(
            r#"{{"model": {{"type": "BPE", "vocab": {{"{}": 0}}}}}}"#,
            "a".repeat(5000)
        );
        check_json(&bpe).unwrap();
    }

    #[test]
    fn invalid_escapes_are_refused_wherever_they_are() {
        check_json(r#"{"decoder": {"a\u00e9": "\ud83d\ude00"}}"#).unwrap();
        for bad in [
            r#"{"decoder": {"a\ud800": 1}}"#,
            r#"{"decoder": ["\ud800"]}"#,
            r#"{"x": "\q"}"#,
            r#"{"x": "\u12"}"#,
        ] {
            assert!(check_json(bad).is_err(), "{bad}");
        }
    }
}
