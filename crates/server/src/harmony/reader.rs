//! [`HarmonyReader`]: a harmony reply read message by message as it streams. A marker cut
//! across pieces is held back until it is whole, so a streamed and a whole reply read the same.

use super::header::Header;
use super::{BODY_ENDS, CHANNEL, CONSTRAIN, MESSAGE, START};

/// A stretch of a harmony reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarmonyEvent {
    /// Text of an `analysis` message.
    Reasoning(String),
    /// Text of a `final` message (or of a reply that is not harmony).
    Content(String),
    /// A whole message to a tool: the function's name and the body (its JSON arguments).
    Call { name: String, arguments: String },
}

/// What a message body is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    Call(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Only blanks (or a header's first characters) so far.
    Opening,
    /// Reading a header, up to `<|message|>`.
    Header,
    /// Inside a body, up to its end marker.
    Body(Body),
    /// The reply does not start with a header: all of it is answer.
    Plain,
}

/// How a reply's first header may begin (the prompt already wrote `<|start|>assistant`).
const HEADER_OPENERS: [&str; 4] = [START, CHANNEL, CONSTRAIN, "to="];

/// Reads one reply.
#[derive(Debug, Clone)]
pub struct HarmonyReader {
    state: State,
    /// Text not read yet: a header, a call's body, or a possible marker prefix.
    held: String,
    /// Pieces pushed while in reasoning.
    reasoning_tokens: usize,
}

impl Default for HarmonyReader {
    fn default() -> Self {
        HarmonyReader {
            state: State::Opening,
            held: String::new(),
            reasoning_tokens: 0,
        }
    }
}

impl HarmonyReader {
    /// The events that can be sent once `text` (one token's text) is added.
    pub fn push(&mut self, text: &str) -> Vec<HarmonyEvent> {
        let was_reasoning = self.in_reasoning();
        self.held.push_str(text);
        let mut out = Vec::new();
        self.advance(&mut out);
        let reasoned = out.iter().any(|e| matches!(e, HarmonyEvent::Reasoning(_)));
        if was_reasoning || reasoned || self.in_reasoning() {
            self.reasoning_tokens += 1;
        }
        out
    }

    /// What is left at the end of the reply: an unfinished body (a call cut short by its
    /// end-of-sequence marker is whole: `<|call|>` ends generation); an unfinished header is
    /// markup, not text.
    pub fn finish(&mut self) -> Vec<HarmonyEvent> {
        let held = std::mem::take(&mut self.held);
        let event = match std::mem::replace(&mut self.state, State::Plain) {
            State::Body(Body::Reasoning) => HarmonyEvent::Reasoning(held),
            State::Body(Body::Call(name)) => HarmonyEvent::Call {
                name,
                arguments: held,
            },
            State::Body(Body::Content) | State::Plain | State::Opening => {
                HarmonyEvent::Content(held)
            }
            State::Header => return Vec::new(),
        };
        non_empty(event).into_iter().collect()
    }

    /// Pieces that belonged to reasoning.
    pub fn reasoning_tokens(&self) -> usize {
        self.reasoning_tokens
    }

    fn in_reasoning(&self) -> bool {
        self.state == State::Body(Body::Reasoning)
    }

    fn advance(&mut self, out: &mut Vec<HarmonyEvent>) {
        loop {
            let more = match self.state.clone() {
                State::Opening => self.open(),
                State::Header => self.header(),
                State::Body(body) => self.body(body, out),
                State::Plain => {
                    out.extend(non_empty(HarmonyEvent::Content(std::mem::take(
                        &mut self.held,
                    ))));
                    false
                }
            };
            if !more {
                return;
            }
        }
    }

    /// Decides whether the reply is harmony; `true` when decided.
    fn open(&mut self) -> bool {
        let t = self.held.trim_start();
        if HEADER_OPENERS.iter().any(|o| t.starts_with(o)) {
            self.state = State::Header;
        } else if t.is_empty() || HEADER_OPENERS.iter().any(|o| o.starts_with(t)) {
            return false;
        } else {
            self.state = State::Plain;
        }
        true
    }

    /// Reads a whole header; `true` when its body starts.
    fn header(&mut self) -> bool {
        let Some(at) = self.held.find(MESSAGE) else {
            return false;
        };
        let header = Header::parse(&self.held[..at]);
        self.held.drain(..at + MESSAGE.len());
        self.state = State::Body(match header.call_name() {
            Some(name) => Body::Call(name.to_string()),
            None if header.is_reasoning() => Body::Reasoning,
            None => Body::Content,
        });
        true
    }

    /// Sends what can be sent of a body; `true` when it ended (the next header follows).
    fn body(&mut self, body: Body, out: &mut Vec<HarmonyEvent>) -> bool {
        let end = BODY_ENDS
            .iter()
            .filter_map(|m| self.held.find(m).map(|at| (at, m.len())))
            .min();
        let (text, ended) = match end {
            Some((at, len)) => {
                let text = self.held[..at].to_string();
                self.held.drain(..at + len);
                self.state = State::Header;
                (text, true)
            }
            None if matches!(body, Body::Call(_)) => return false,
            None => {
                let keep = partial_marker_len(&self.held);
                let tail = self.held.split_off(self.held.len() - keep);
                (std::mem::replace(&mut self.held, tail), false)
            }
        };
        let event = match body {
            Body::Reasoning => HarmonyEvent::Reasoning(text),
            Body::Content => HarmonyEvent::Content(text),
            Body::Call(name) => HarmonyEvent::Call {
                name,
                arguments: text,
            },
        };
        out.extend(non_empty(event));
        ended
    }
}

fn non_empty(event: HarmonyEvent) -> Option<HarmonyEvent> {
    match &event {
        HarmonyEvent::Reasoning(t) | HarmonyEvent::Content(t) if t.is_empty() => None,
        _ => Some(event),
    }
}

/// The length of the longest end of `text` that begins a body's end marker.
fn partial_marker_len(text: &str) -> usize {
    let longest = BODY_ENDS.iter().map(|m| m.len()).max().unwrap_or(0);
    (1..longest.min(text.len() + 1))
        .rev()
        .find(|&n| {
            let at = text.len() - n;
            text.is_char_boundary(at) && BODY_ENDS.iter().any(|m| m.starts_with(&text[at..]))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of `pieces`, adjacent texts of one kind joined.
    fn read(pieces: &[&str]) -> Vec<HarmonyEvent> {
        let mut r = HarmonyReader::default();
        let mut all: Vec<HarmonyEvent> = pieces.iter().flat_map(|p| r.push(p)).collect();
        all.extend(r.finish());
        let mut joined: Vec<HarmonyEvent> = Vec::new();
        for e in all {
            match (joined.last_mut(), e) {
                (Some(HarmonyEvent::Reasoning(a)), HarmonyEvent::Reasoning(b)) => a.push_str(&b),
                (Some(HarmonyEvent::Content(a)), HarmonyEvent::Content(b)) => a.push_str(&b),
                (_, e) => joined.push(e),
            }
        }
        joined
    }

    /// Every cut of `text` into two pieces, and one piece per character.
    fn cuts(text: &str) -> Vec<Vec<String>> {
        let mut all: Vec<Vec<String>> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .map(|i| vec![text[..i].to_string(), text[i..].to_string()])
            .collect();
        all.push(text.chars().map(String::from).collect());
        all
    }

    fn each_cut(text: &str, want: &[HarmonyEvent]) {
        for pieces in cuts(text) {
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            assert_eq!(read(&pieces), want, "{pieces:?}");
        }
    }

    fn reasoning(t: &str) -> HarmonyEvent {
        HarmonyEvent::Reasoning(t.into())
    }

    fn content(t: &str) -> HarmonyEvent {
        HarmonyEvent::Content(t.into())
    }

    fn call(name: &str, arguments: &str) -> HarmonyEvent {
        HarmonyEvent::Call {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn analysis_then_final_however_it_is_cut() {
        let text = "<|channel|>analysis<|message|>User greets. Reply.<|end|>\
                    <|start|>assistant<|channel|>final<|message|>Hello there!<|return|>";
        each_cut(
            text,
            &[reasoning("User greets. Reply."), content("Hello there!")],
        );
    }

    #[test]
    fn a_call_to_a_function_in_either_header_order() {
        let text = "<|channel|>analysis<|message|>Need weather.<|end|>\
                    <|start|>assistant<|channel|>commentary to=functions.get_weather \
                    <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";
        each_cut(
            text,
            &[
                reasoning("Need weather."),
                call("get_weather", "{\"city\":\"Paris\"}"),
            ],
        );
        let text = " to=functions.add<|channel|>commentary json<|message|>{\"a\":1}";
        each_cut(text, &[call("add", "{\"a\":1}")]);
    }

    #[test]
    fn text_that_is_not_harmony_is_all_answer() {
        for text in [
            "{\"city\": \"Paris\"}",
            "Hello <|end|> there",
            "<",
            "  plain",
        ] {
            each_cut(text, &[content(text)]);
        }
        each_cut("", &[]);
    }

    #[test]
    fn a_final_message_cut_short_keeps_its_text_and_a_bare_header_is_dropped() {
        each_cut("<|channel|>final<|message|>Hel", &[content("Hel")]);
        each_cut(
            "<|channel|>analysis<|message|>a<|end|><|start|>assistant",
            &[reasoning("a")],
        );
        each_cut("<|channel|>final<|message|>a <|en", &[content("a <|en")]);
    }

    #[test]
    fn reasoning_tokens_count_the_analysis_message() {
        let mut r = HarmonyReader::default();
        let pieces = [
            "<|channel|>",
            "analysis",
            "<|message|>",
            "a",
            "b",
            "<|end|>",
            "<|start|>",
            "assistant",
            "<|channel|>",
            "final",
            "<|message|>",
            "Hi",
        ];
        for p in pieces {
            r.push(p);
        }
        assert_eq!(r.reasoning_tokens(), 4);
    }
}
