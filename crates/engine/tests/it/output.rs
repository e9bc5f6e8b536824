//! Incremental detokenization and stop-string tests with small mock vocabularies.

use kestrel_engine::output::{
    IncrementalDecoder, StopMatcher, StopOutput, TextStream, TokenDecoder,
};

/// Byte-level mock: ids 0..256 are single bytes, higher ids are whole words.
struct Bytes {
    words: Vec<&'static str>,
}

impl Bytes {
    fn new() -> Self {
        Bytes {
            words: vec!["Hello", " world", "!", " STOP", "ST", "OP", " 大"],
        }
    }

    fn word(&self, w: &str) -> u32 {
        256 + self
            .words
            .iter()
            .position(|x| *x == w)
            .expect("word in mock vocab") as u32
    }

    fn byte_ids(s: &str) -> Vec<u32> {
        s.bytes().map(u32::from).collect()
    }
}

impl TokenDecoder for Bytes {
    fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if id < 256 {
                bytes.push(id as u8);
            } else {
                bytes.extend_from_slice(self.words[(id - 256) as usize].as_bytes());
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// SentencePiece-like mock: pieces use '▁' for spaces and the decoder strips one leading space.
struct Pieces(Vec<&'static str>);

impl TokenDecoder for Pieces {
    fn decode(&self, ids: &[u32]) -> String {
        let text: String = ids
            .iter()
            .map(|&i| self.0[i as usize])
            .collect::<String>()
            .replace('▁', " ");
        text.strip_prefix(' ').map(str::to_string).unwrap_or(text)
    }
}

fn push_all(dec: &mut IncrementalDecoder, vocab: &impl TokenDecoder, ids: &[u32]) -> Vec<String> {
    ids.iter().map(|&id| dec.push(vocab, id)).collect()
}

#[test]
fn emoji_split_over_byte_tokens_is_withheld_until_complete() {
    let vocab = Bytes::new();
    let mut dec = IncrementalDecoder::new();
    let mut ids = vec![vocab.word("Hello")];
    ids.extend(Bytes::byte_ids(" 🦀"));
    ids.push(vocab.word("!"));
    let chunks = push_all(&mut dec, &vocab, &ids);
    assert_eq!(chunks, vec!["Hello", " ", "", "", "", "🦀", "!"]);
    assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')));
    assert_eq!(dec.generated(), ids.as_slice());
}

#[test]
fn cjk_split_across_tokens_decodes_whole() {
    let vocab = Bytes::new();
    let mut dec = IncrementalDecoder::new();
    // "大模" as: a word token " 大", then the three bytes of 模.
    let mut ids = vec![vocab.word(" 大")];
    ids.extend(Bytes::byte_ids("模"));
    let chunks = push_all(&mut dec, &vocab, &ids);
    assert_eq!(chunks, vec![" 大", "", "", "模"]);
    assert_eq!(chunks.concat(), " 大模");
}

#[test]
fn flush_releases_an_incomplete_tail() {
    let vocab = Bytes::new();
    let mut dec = IncrementalDecoder::new();
    let ids = Bytes::byte_ids("🦀");
    assert_eq!(push_all(&mut dec, &vocab, &ids[..2]), vec!["", ""]);
    assert_eq!(dec.flush(&vocab), "\u{FFFD}");
    assert_eq!(dec.flush(&vocab), "");
}

#[test]
fn concatenated_chunks_equal_full_decode() {
    let vocab = Bytes::new();
    let mut ids = Bytes::byte_ids("naïve café — 日本語 ✓ ");
    ids.push(vocab.word("Hello"));
    ids.extend(Bytes::byte_ids("👩‍👩‍👧"));
    let mut dec = IncrementalDecoder::new();
    let mut text = push_all(&mut dec, &vocab, &ids).concat();
    text.push_str(&dec.flush(&vocab));
    assert_eq!(text, vocab.decode(&ids));
}

#[test]
fn context_restores_leading_space_of_first_generated_piece() {
    let vocab = Pieces(vec!["▁Hello", "▁world", ",", "▁there"]);
    let mut without = IncrementalDecoder::new();
    assert_eq!(without.push(&vocab, 1), "world");
    let mut with = IncrementalDecoder::with_context(&[0]);
    assert_eq!(
        push_all(&mut with, &vocab, &[1, 2, 3]),
        vec![" world", ",", " there"]
    );
    assert_eq!(with.generated(), &[1, 2, 3]);
}

#[test]
fn stop_string_spanning_chunks_truncates_before_it() {
    let mut stops = StopMatcher::new(["</s>", "STOP"]);
    assert_eq!(
        stops.push("Hello </"),
        StopOutput {
            text: "Hello ".into(),
            stopped: None
        }
    );
    assert_eq!(
        stops.push("s> ignored"),
        StopOutput {
            text: String::new(),
            stopped: Some(0)
        }
    );
    assert_eq!(stops.stopped(), Some(0));
    assert_eq!(stops.push("more"), StopOutput::default());
}

#[test]
fn partial_stop_prefix_then_divergence_releases_text() {
    let mut stops = StopMatcher::new(["</s>"]);
    assert_eq!(stops.push("ab <").text, "ab ");
    assert_eq!(stops.push("/").text, "");
    let out = stops.push("x done");
    assert_eq!(out.text, "</x done");
    assert_eq!(out.stopped, None);
    assert_eq!(stops.push("<").text, "");
    assert_eq!(stops.finish(), "<");
}

#[test]
fn stop_inside_one_chunk_and_earliest_wins() {
    let mut stops = StopMatcher::new(["world", "o"]);
    assert_eq!(
        stops.push("hello world"),
        StopOutput {
            text: "hell".into(),
            stopped: Some(1)
        }
    );
    let mut overlap = StopMatcher::new(["abcd", "bc"]);
    assert_eq!(overlap.push("xab").text, "x");
    assert_eq!(
        overlap.push("c"),
        StopOutput {
            text: "a".into(),
            stopped: Some(1)
        }
    );
}

#[test]
fn multibyte_stop_prefix_is_held_on_char_boundaries() {
    let mut stops = StopMatcher::new(["日本", ""]);
    assert_eq!(stops.stops(), &["日本".to_string()]);
    assert_eq!(stops.push("xx日").text, "xx");
    assert_eq!(stops.push("語").text, "日語");
    assert_eq!(stops.push("日").text, "");
    let out = stops.push("本語");
    assert_eq!(out.text, "");
    assert_eq!(out.stopped, Some(0));
}

#[test]
fn text_stream_stops_across_tokens() {
    let vocab = Bytes::new();
    let mut stream = TextStream::new(&[], ["STOP"]);
    let ids = [
        vocab.word("Hello"),
        vocab.word(" world"),
        32,
        vocab.word("ST"),
        vocab.word("OP"),
        vocab.word("!"),
    ];
    let mut text = String::new();
    let mut stopped = None;
    for id in ids {
        let step = stream.push(&vocab, id);
        text.push_str(&step.text);
        if step.stopped.is_some() {
            stopped = step.stopped;
            break;
        }
    }
    assert_eq!(text, "Hello world ");
    assert_eq!(stopped, Some(0));
}

#[test]
fn text_stream_finish_releases_held_text() {
    let vocab = Bytes::new();
    let mut stream = TextStream::new(&[], ["STOP"]);
    let a = stream.push(&vocab, vocab.word("Hello"));
    let b = stream.push(&vocab, vocab.word("ST"));
    assert_eq!((a.text.as_str(), b.text.as_str()), ("Hello", ""));
    let end = stream.finish(&vocab);
    assert_eq!(end.text, "ST");
    assert_eq!(end.stopped, None);
    assert_eq!(stream.generated().len(), 2);
}

#[test]
fn include_stop_keeps_the_stop_string() {
    let mut stops = StopMatcher::new(["STOP"]).including_stop(true);
    assert_eq!(stops.push("abc ST").text, "abc ");
    let out = stops.push("OP tail");
    assert_eq!(out.text, "STOP");
    assert_eq!(out.stopped, Some(0));
}

/// Ids 0..=1 are words, 2 is a special end-of-sequence token.
struct WithSpecial;

impl TokenDecoder for WithSpecial {
    fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .filter(|&&i| i != 2)
            .map(|&i| ["a", " b"][i as usize])
            .collect()
    }
    fn decode_with_special(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&i| ["a", " b", "</s>"][i as usize])
            .collect()
    }
}

#[test]
fn special_tokens_are_skipped_unless_kept() {
    let run = |keep: bool| {
        let mut stream = TextStream::new(&[0], std::iter::empty::<String>()).keeping_special(keep);
        let mut text: String = [1, 2]
            .iter()
            .map(|&id| stream.push(&WithSpecial, id).text)
            .collect();
        text.push_str(&stream.finish(&WithSpecial).text);
        text
    };
    assert_eq!(run(false), " b");
    assert_eq!(run(true), " b</s>");
}
