//! Incremental parser for `text/event-stream` (Server-Sent Events) bodies.
//!
//! Bytes arrive in arbitrary pieces: one TCP read may hold half an event, or several events,
//! or end in the middle of a UTF-8 sequence or between `\r` and `\n`. [`SseParser`] buffers
//! bytes, cuts complete lines, and returns the `data` payload of every event completed by a blank
//! line. Comment lines (starting with `:`, used as keep-alives) and the `event`, `id` and `retry`
//! fields are skipped; several `data:` lines in one event are joined with `\n`, as the SSE
//! specification says.
//!
//! ```text
//!   read 1: "data: {\"a\"" | read 2: ":1}\n\n: ping\n\ndata: [DONE]\n\n"
//!   events:                   {"a":1}                   [DONE]
//! ```

/// Streaming SSE decoder; feed it body bytes, get back completed event payloads.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes not yet terminated by a line ending.
    pending: Vec<u8>,
    /// `data` lines of the event being assembled.
    data: Vec<String>,
    /// Whether the current event has seen any `data` field (an empty `data:` still counts).
    has_data: bool,
}

impl SseParser {
    /// A parser with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes the next bytes of the body and returns the payloads of the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some((end, next)) = next_line_end(&self.pending, start) {
            let line = String::from_utf8_lossy(&self.pending[start..end]).into_owned();
            if let Some(event) = self.process_line(&line) {
                events.push(event);
            }
            start = next;
        }
        self.pending.drain(..start);
        events
    }

    /// Ends the stream: returns the event still being assembled, if it has data.
    ///
    /// Strictly, the SSE specification drops an event that is not followed by a blank line; a
    /// load generator is more useful when it accepts a body whose last blank line is missing.
    pub fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        if !rest.is_empty() {
            let line = String::from_utf8_lossy(&rest).into_owned();
            if let Some(event) = self.process_line(line.trim_end_matches('\r')) {
                return Some(event);
            }
        }
        self.dispatch()
    }

    fn process_line(&mut self, line: &str) -> Option<String> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            self.data.push(value.to_owned());
            self.has_data = true;
        }
        None
    }

    fn dispatch(&mut self) -> Option<String> {
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(std::mem::take(&mut self.data).join("\n"))
    }
}

/// Finds the first line ending at or after `from`: returns (end of line, start of next line).
///
/// A `\r` that is the last buffered byte is not treated as an ending yet, because a `\n` may
/// follow in the next read and the pair must count as one ending.
fn next_line_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let pos = from + buf[from..].iter().position(|&b| b == b'\n' || b == b'\r')?;
    if buf[pos] == b'\n' {
        return Some((pos, pos + 1));
    }
    match buf.get(pos + 1) {
        Some(b'\n') => Some((pos, pos + 2)),
        Some(_) => Some((pos, pos + 1)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&[u8]]) -> Vec<String> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for part in parts {
            out.extend(p.feed(part));
        }
        out.extend(p.finish());
        out
    }

    #[test]
    fn one_event_per_read() {
        let got = feed_all(&[b"data: {\"x\":1}\n\n", b"data: [DONE]\n\n"]);
        assert_eq!(got, vec!["{\"x\":1}", "[DONE]"]);
    }

    #[test]
    fn event_split_across_reads_at_every_byte() {
        let body = b"data: {\"text\":\"hello\"}\n\ndata: [DONE]\n\n";
        for cut in 1..body.len() {
            let got = feed_all(&[&body[..cut], &body[cut..]]);
            assert_eq!(got, vec!["{\"text\":\"hello\"}", "[DONE]"], "cut at {cut}");
        }
    }

    #[test]
    fn byte_by_byte_feeding_matches_whole_feeding() {
        let body: &[u8] =
            b": keep-alive\n\ndata: a\n\nevent: x\ndata: b\nid: 3\n\ndata: [DONE]\n\n";
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(feed_all(&bytes), feed_all(&[body]));
        assert_eq!(feed_all(&[body]), vec!["a", "b", "[DONE]"]);
    }

    #[test]
    fn several_events_in_one_read_are_returned_in_order() {
        let mut p = SseParser::new();
        let got = p.feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4");
        assert_eq!(got, vec!["1", "2", "3"]);
        assert_eq!(p.feed(b"\n\n"), vec!["4"]);
    }

    #[test]
    fn comments_and_other_fields_are_ignored() {
        let got = feed_all(&[b": ping\n\n:another\nretry: 10\n\ndata: x\n\n"]);
        assert_eq!(got, vec!["x"]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newline() {
        assert_eq!(
            feed_all(&[b"data: a\ndata:b\ndata:  c\n\n"]),
            vec!["a\nb\n c"]
        );
    }

    #[test]
    fn crlf_and_cr_line_endings_even_when_split() {
        assert_eq!(
            feed_all(&[b"data: a\r", b"\n\r", b"\ndata: b\r\r"]),
            vec!["a", "b"]
        );
    }

    #[test]
    fn utf8_split_inside_a_character() {
        let body = "data: {\"text\":\"héllo\"}\n\n".as_bytes();
        let cut = body.iter().position(|&b| b == 0xC3).unwrap() + 1;
        assert_eq!(
            feed_all(&[&body[..cut], &body[cut..]]),
            vec!["{\"text\":\"héllo\"}"]
        );
    }

    #[test]
    fn usage_chunk_then_done() {
        let usage = br#"data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#;
        let got = feed_all(&[
            b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n",
            usage,
            b"\n\ndata: [DONE]\n\n",
        ]);
        assert_eq!(got.len(), 3);
        assert!(got[1].contains("\"completion_tokens\":3"));
        assert_eq!(got[2], "[DONE]");
    }

    #[test]
    fn finish_flushes_an_unterminated_event_once() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: [DONE]").is_empty());
        assert_eq!(p.finish().as_deref(), Some("[DONE]"));
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn blank_lines_without_data_dispatch_nothing() {
        assert!(feed_all(&[b"\n\n\n: c\n\nevent: e\n\n"]).is_empty());
    }
}
