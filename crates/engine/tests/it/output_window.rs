//! The incremental decoder's window stays bounded when ids add no text (skipped special
//! tokens) or never complete a character (stray UTF-8 continuation bytes), and the text is
//! what a plain decode gives.

use std::cell::Cell;

use kestrel_engine::output::{IncrementalDecoder, TokenDecoder};

/// Ids below 256 are bytes; [`SPECIAL`] is a special token (left out of decoded text). Records
/// the longest slice it was asked to decode.
#[derive(Default)]
struct Counting {
    longest: Cell<usize>,
}

const SPECIAL: u32 = 300;

impl TokenDecoder for Counting {
    fn decode(&self, ids: &[u32]) -> String {
        self.longest.set(self.longest.get().max(ids.len()));
        let bytes: Vec<u8> = ids.iter().filter(|&&i| i < 256).map(|&i| i as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

fn run(dec: &Counting, ids: &[u32]) -> String {
    let mut d = IncrementalDecoder::with_context(b"ctx".map(u32::from).as_slice());
    let mut text: String = ids.iter().map(|&id| d.push(dec, id)).collect();
    assert!(d.window_len() <= 16, "window of {} ids", d.window_len());
    text.push_str(&d.flush(dec));
    text
}

#[test]
fn a_thousand_special_tokens_keep_the_window_short_and_the_text() {
    let dec = Counting::default();
    let mut ids = vec![u32::from(b'a')];
    ids.extend(std::iter::repeat_n(SPECIAL, 1000));
    ids.extend("b é".bytes().map(u32::from));
    assert_eq!(run(&dec, &ids), "ab é");
    assert!(
        dec.longest.get() <= 10,
        "decoded {} ids at once",
        dec.longest.get()
    );
}

#[test]
fn stray_continuation_bytes_do_not_grow_the_window() {
    let dec = Counting::default();
    let mut ids = vec![u32::from(b'x')];
    ids.extend(std::iter::repeat_n(0x80, 1000));
    ids.push(u32::from(b'y'));
    let text = run(&dec, &ids);
    assert!(text.starts_with('x') && text.ends_with('y'), "{text:?}");
    assert!(text.contains('\u{FFFD}'));
    assert!(
        dec.longest.get() <= 16,
        "decoded {} ids at once",
        dec.longest.get()
    );
}

#[test]
fn split_characters_still_wait_for_their_last_byte() {
    let dec = Counting::default();
    let mut d = IncrementalDecoder::new();
    let bytes: Vec<u32> = "大".bytes().map(u32::from).collect();
    assert_eq!(d.push(&dec, bytes[0]), "");
    assert_eq!(d.push(&dec, bytes[1]), "");
    assert_eq!(d.push(&dec, bytes[2]), "大");
}
