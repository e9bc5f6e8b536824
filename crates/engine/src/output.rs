//! Streaming text out of generated tokens.
//!
//! * [`IncrementalDecoder`] turns token ids, fed one at a time, into newly completed text. It
//!   never emits a broken UTF-8 character: while the decoded tail ends in U+FFFD (a byte-level or
//!   byte-fallback token that is only part of a character), the text is withheld.
//! * [`StopMatcher`] cuts the text at the first stop string, even one spread over several
//!   chunks, and withholds any tail that could still grow into a stop string.
//! * [`TextStream`] chains the two for one request.
//!
//! The decoder works on a window of ids, as vLLM and TGI do:
//!
//! ```text
//! ids:   [ .. already emitted .. | prefix_offset .. read_offset | new ids ]
//!                                 └─ prefix text ─┘
//!        decode(ids[prefix_offset..])  minus  decode(ids[prefix_offset..read_offset])
//!        = the new text (emitted only if it does not end in U+FFFD)
//! ```
//!
//! Decoding a short window instead of a single id keeps context-dependent decoders (SentencePiece
//! leading-space stripping, byte fallback) correct, and keeps each step O(window) rather than
//! O(generated).

/// Turns token ids into text. Implemented by the model crate's tokenizer, so this crate needs no
/// tokenizer dependency.
pub trait TokenDecoder {
    /// Text of `ids`, special tokens left out. Incomplete UTF-8 sequences must come out as
    /// U+FFFD.
    fn decode(&self, ids: &[u32]) -> String;
    /// Text of `ids` with special tokens (such as the end-of-sequence token) written out; a
    /// decoder without special tokens decodes as [`TokenDecoder::decode`].
    fn decode_with_special(&self, ids: &[u32]) -> String {
        self.decode(ids)
    }
}

const REPLACEMENT: char = '\u{FFFD}';

/// How many context ids (e.g. the prompt's tail) seed the decoding window; also the most
/// prefix ids kept while ids add no text.
const CONTEXT_IDS: usize = 6;

/// Ids after which text still ending in U+FFFD is emitted anyway (a UTF-8 character needs at
/// most 4 byte tokens), so a model emitting invalid bytes cannot grow the window.
const MAX_PENDING_IDS: usize = 8;

/// Decodes generated ids incrementally; see the module docs for the offset scheme.
#[derive(Debug, Clone, Default)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    context_len: usize,
    /// Write special tokens out instead of skipping them.
    keep_special: bool,
}

impl IncrementalDecoder {
    /// A decoder with no context.
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder whose window starts with the last few `context` ids (usually the prompt), so
    /// that the first generated token decodes as it would after the prompt (for example with its
    /// leading space). The context's own text is never emitted.
    pub fn with_context(context: &[u32]) -> Self {
        let tail = &context[context.len().saturating_sub(CONTEXT_IDS)..];
        IncrementalDecoder {
            ids: tail.to_vec(),
            prefix_offset: 0,
            read_offset: tail.len(),
            context_len: tail.len(),
            keep_special: false,
        }
    }

    fn text(&self, decoder: &impl TokenDecoder, ids: &[u32]) -> String {
        if self.keep_special {
            decoder.decode_with_special(ids)
        } else {
            decoder.decode(ids)
        }
    }

    /// Generated ids pushed so far (context excluded).
    pub fn generated(&self) -> &[u32] {
        &self.ids[self.context_len..]
    }

    /// Appends `id` and returns the text it completes (often empty).
    ///
    /// The window stays short whatever the ids: ids that add no text (skipped special tokens)
    /// are consumed at once, keeping at most [`CONTEXT_IDS`] ids of prefix, and text that stays
    /// incomplete for [`MAX_PENDING_IDS`] ids is emitted as it decodes (with U+FFFD).
    pub fn push(&mut self, decoder: &impl TokenDecoder, id: u32) -> String {
        self.ids.push(id);
        let prefix = self.text(decoder, &self.ids[self.prefix_offset..self.read_offset]);
        let full = self.text(decoder, &self.ids[self.prefix_offset..]);
        if full == prefix {
            self.read_offset = self.ids.len();
            self.prefix_offset = self
                .prefix_offset
                .max(self.read_offset.saturating_sub(CONTEXT_IDS));
            return String::new();
        }
        let pending = self.ids.len() - self.read_offset;
        if pending >= MAX_PENDING_IDS {
            return self.flush_window(&full, &prefix);
        }
        if full.len() <= prefix.len() || full.ends_with(REPLACEMENT) {
            return String::new();
        }
        match full.get(prefix.len()..) {
            Some(new) => {
                let new = new.to_string();
                self.prefix_offset = self.read_offset;
                self.read_offset = self.ids.len();
                new
            }
            None => String::new(),
        }
    }

    /// Ids in the decoding window (what one `push` decodes), for tests and diagnostics.
    pub fn window_len(&self) -> usize {
        self.ids.len() - self.prefix_offset
    }

    /// Emits the window's text after `prefix` and starts a new window.
    fn flush_window(&mut self, full: &str, prefix: &str) -> String {
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        tail_after(full, prefix)
    }

    /// Emits whatever is still withheld (possibly ending in U+FFFD), for when generation ends.
    pub fn flush(&mut self, decoder: &impl TokenDecoder) -> String {
        if self.read_offset == self.ids.len() {
            return String::new();
        }
        let prefix = self.text(decoder, &self.ids[self.prefix_offset..self.read_offset]);
        let full = self.text(decoder, &self.ids[self.prefix_offset..]);
        self.flush_window(&full, &prefix)
    }
}

/// `full` without its first `prefix.len()` bytes, snapped forward to a character boundary.
fn tail_after(full: &str, prefix: &str) -> String {
    let mut start = prefix.len().min(full.len());
    while !full.is_char_boundary(start) {
        start += 1;
    }
    full[start..].to_string()
}

/// The outcome of feeding text to a [`StopMatcher`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopOutput {
    /// Text that is safe to emit now.
    pub text: String,
    /// Index (into the matcher's stop list) of the stop string that ended generation.
    pub stopped: Option<usize>,
}

/// Finds stop strings across chunk boundaries.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: Option<usize>,
    /// Keep the stop string itself in the text.
    include_stop: bool,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored (they would match everywhere).
    pub fn new<I, S>(stops: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        StopMatcher {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            held: String::new(),
            stopped: None,
            include_stop: false,
        }
    }

    /// The same matcher, keeping the stop string that fires in the text when `include`.
    pub fn including_stop(mut self, include: bool) -> Self {
        self.include_stop = include;
        self
    }

    /// The stop strings, in the order indices in [`StopOutput::stopped`] refer to.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    /// The stop that fired, if any.
    pub fn stopped(&self) -> Option<usize> {
        self.stopped
    }

    /// Feeds the next chunk. After a stop has fired, all further text is dropped.
    pub fn push(&mut self, text: &str) -> StopOutput {
        if self.stopped.is_some() {
            return StopOutput::default();
        }
        self.held.push_str(text);
        if let Some((pos, index)) = self.earliest_match() {
            let end = if self.include_stop {
                pos + self.stops[index].len()
            } else {
                pos
            };
            self.held.truncate(end);
            self.stopped = Some(index);
            return StopOutput {
                text: std::mem::take(&mut self.held),
                stopped: Some(index),
            };
        }
        let keep_from = self.partial_match_start();
        let rest = self.held.split_off(keep_from);
        StopOutput {
            text: std::mem::replace(&mut self.held, rest),
            stopped: None,
        }
    }

    /// Releases withheld text when generation ends without a stop string.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// `(byte position, stop index)` of the leftmost stop occurrence; ties go to the earlier stop.
    fn earliest_match(&self) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|pos| (pos, i)))
            .min()
    }

    /// Start of the longest suffix of `held` that is a proper prefix of some stop string
    /// (`held.len()` when there is none).
    fn partial_match_start(&self) -> usize {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let first = self.held.len().saturating_sub(longest.saturating_sub(1));
        (first..self.held.len())
            .filter(|&i| self.held.is_char_boundary(i))
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len())
    }
}

/// One step of a [`TextStream`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamStep {
    /// Text to send to the client now.
    pub text: String,
    /// Index of the stop string that ended generation, if one did.
    pub stopped: Option<usize>,
}

/// Incremental detokenization followed by stop-string matching, for one request.
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    decoder: IncrementalDecoder,
    stops: StopMatcher,
}

impl TextStream {
    /// A stream whose decoding window is seeded with `context` (see
    /// [`IncrementalDecoder::with_context`]) and which stops at any of `stops`.
    pub fn new<I, S>(context: &[u32], stops: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TextStream {
            decoder: IncrementalDecoder::with_context(context),
            stops: StopMatcher::new(stops),
        }
    }

    /// The same stream, keeping the stop string that fires in the text when `include`.
    pub fn including_stop(mut self, include: bool) -> Self {
        self.stops = self.stops.including_stop(include);
        self
    }

    /// The same stream, writing special tokens out when `keep`.
    pub fn keeping_special(mut self, keep: bool) -> Self {
        self.decoder.keep_special = keep;
        self
    }

    /// Feeds one generated id.
    pub fn push(&mut self, decoder: &impl TokenDecoder, id: u32) -> StreamStep {
        let text = self.decoder.push(decoder, id);
        let out = self.stops.push(&text);
        StreamStep {
            text: out.text,
            stopped: out.stopped,
        }
    }

    /// Ends the stream (no stop string fired): returns all text still withheld.
    pub fn finish(&mut self, decoder: &impl TokenDecoder) -> StreamStep {
        let tail = self.decoder.flush(decoder);
        let mut out = self.stops.push(&tail);
        if out.stopped.is_none() {
            out.text.push_str(&self.stops.finish());
        }
        StreamStep {
            text: out.text,
            stopped: out.stopped,
        }
    }

    /// Generated ids so far.
    pub fn generated(&self) -> &[u32] {
        self.decoder.generated()
    }
}
