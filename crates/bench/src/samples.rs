//! [`Samples`]: the per-request latencies and token arrival times of a run's successful
//! requests, kept beside the report's statistics for [`crate::plot`].

use std::time::Duration;

use crate::outcome::Measured;

/// Raw latency samples (milliseconds) and when output tokens arrived.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// Time to first token, one per request.
    pub ttft_ms: Vec<f64>,
    /// Time per output token after the first, one per request with at least two tokens.
    pub tpot_ms: Vec<f64>,
    /// Gaps between content chunks, all requests together.
    pub itl_ms: Vec<f64>,
    /// End-to-end latency, one per request.
    pub e2el_ms: Vec<f64>,
    /// `(seconds since the run started, output tokens)` per content chunk: a chunk's tokens
    /// are the request's output tokens spread evenly over its chunks.
    pub token_times: Vec<(f64, f64)>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Samples {
    /// The samples of `ok`, the successful requests.
    pub fn of<'a>(ok: impl IntoIterator<Item = &'a Measured>) -> Samples {
        let mut s = Samples::default();
        for m in ok {
            s.ttft_ms.push(ms(m.ttft));
            s.tpot_ms.extend(m.tpot().map(ms));
            s.itl_ms.extend(m.itl.iter().map(|d| ms(*d)));
            s.e2el_ms.push(ms(m.e2e));
            let per_chunk = m.output_tokens() as f64 / m.content_chunks.max(1) as f64;
            let mut at = m.sent_at + m.ttft;
            s.token_times.push((at.as_secs_f64(), per_chunk));
            for gap in &m.itl {
                at += *gap;
                s.token_times.push((at.as_secs_f64(), per_chunk));
            }
        }
        s
    }

    /// Output tokens per one-second bucket of the run, from second 0 to the last token.
    pub fn throughput_per_second(&self) -> Vec<f64> {
        let last = self.token_times.iter().map(|&(t, _)| t).fold(0.0, f64::max);
        let mut buckets = vec![0.0; last.floor() as usize + 1];
        for &(t, tokens) in &self.token_times {
            if let Some(b) = buckets.get_mut(t.max(0.0).floor() as usize) {
                *b += tokens;
            }
        }
        buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(sent_ms: u64, ttft: u64, itl: &[u64], tokens: u64) -> Measured {
        Measured {
            ttft: Duration::from_millis(ttft),
            itl: itl.iter().map(|&m| Duration::from_millis(m)).collect(),
            e2e: Duration::from_millis(ttft + itl.iter().sum::<u64>()),
            content_chunks: itl.len() as u64 + 1,
            usage_completion_tokens: Some(tokens),
            usage_prompt_tokens: Some(5),
            est_prompt_tokens: 5,
            retried: false,
            sent_at: Duration::from_millis(sent_ms),
        }
    }

    #[test]
    fn tokens_land_in_the_second_they_arrived() {
        // Request 1: chunks at 0.5 s, 0.9 s, 1.2 s (one token each).
        // Request 2: sent at 2 s, chunks at 2.1 s and 2.3 s carrying 4 tokens together.
        let a = measured(0, 500, &[400, 300], 3);
        let b = measured(2000, 100, &[200], 4);
        let s = Samples::of([&a, &b]);
        assert_eq!(s.ttft_ms, vec![500.0, 100.0]);
        assert_eq!(s.itl_ms, vec![400.0, 300.0, 200.0]);
        assert_eq!(s.tpot_ms.len(), 2);
        assert_eq!(s.throughput_per_second(), vec![2.0, 1.0, 4.0]);
        assert_eq!(Samples::default().throughput_per_second(), vec![0.0]);
    }
}
