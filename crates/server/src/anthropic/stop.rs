//! [`StopSequences`]: which of a request's `stop_sequences` ended its reply.
//!
//! The engine says only that a stop string fired (`FinishReason::Stop`), not which. Messages
//! requests therefore keep the stop string in the engine's text
//! (`include_stop_str_in_output`), and the route cuts it off here. The engine releases text
//! that may begin a stop string only once it cannot, and when a stop fires it releases the
//! held text with the whole stop string at its end, in one piece (a token's text or the
//! finished tail), after which nothing follows. So a piece that ends with a stop string is the
//! last piece, and the stop that fired is the longest stop string it ends with (the one that
//! starts earliest, as the engine's matcher picks it).

/// A request's stop sequences and the one that fired, once seen.
#[derive(Debug, Clone, Default)]
pub struct StopSequences {
    stops: Vec<String>,
    matched: Option<String>,
}

impl StopSequences {
    /// Watches for `stops` (the request's `stop_sequences`).
    pub fn new(stops: &[String]) -> Self {
        StopSequences {
            stops: stops.to_vec(),
            matched: None,
        }
    }

    /// `piece` without the stop string it ends with, noting that stop string.
    pub fn cut<'a>(&mut self, piece: &'a str) -> &'a str {
        if self.stops.is_empty() || self.matched.is_some() {
            return piece;
        }
        let found = self
            .stops
            .iter()
            .filter(|s| !s.is_empty() && piece.ends_with(s.as_str()))
            .max_by_key(|s| s.len());
        match found {
            Some(stop) => {
                self.matched = Some(stop.clone());
                &piece[..piece.len() - stop.len()]
            }
            None => piece,
        }
    }

    /// The stop string that fired, if one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_stop_ending_a_piece_is_cut_once() {
        let mut s = StopSequences::new(&["a".into(), "ba".into(), "END".into()]);
        assert_eq!(s.cut("hello "), "hello ");
        assert_eq!(s.matched(), None);
        assert_eq!(s.cut("xyba"), "xy");
        assert_eq!(s.matched(), Some("ba"));
        assert_eq!(s.cut("END"), "END", "nothing follows a stop");
        let mut none = StopSequences::new(&[]);
        assert_eq!(none.cut("END"), "END");
        assert_eq!(none.matched(), None);
    }
}
