//! Goodput: the requests per second that met every service-level objective (vLLM's
//! `--goodput`). [`Objectives`] parses `ttft:500,tpot:50,e2el:2000` (milliseconds; commas or
//! spaces between pairs); [`Goodput`] is what the report carries.

use std::str::FromStr;

use serde::Serialize;

use crate::outcome::Measured;

/// Latency limits in milliseconds; absent ones do not apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Objectives {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

/// A `--goodput` value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--goodput {0}")]
pub struct ObjectivesError(String);

impl FromStr for Objectives {
    type Err = ObjectivesError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = Objectives::default();
        let pairs = s.split([',', ' ']).filter(|p| !p.is_empty());
        for pair in pairs {
            let (key, value) = pair.split_once(':').ok_or_else(|| {
                ObjectivesError(format!("expects metric:milliseconds, got {pair:?}"))
            })?;
            let ms: f64 = value
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| {
                    ObjectivesError(format!("{key}: {value:?} is not a positive number of ms"))
                })?;
            let slot = match key {
                "ttft" => &mut out.ttft_ms,
                "tpot" => &mut out.tpot_ms,
                "e2el" => &mut out.e2el_ms,
                other => {
                    return Err(ObjectivesError(format!(
                        "unknown metric {other:?} (expected ttft, tpot or e2el)"
                    )))
                }
            };
            if slot.replace(ms).is_some() {
                return Err(ObjectivesError(format!("{key} is given twice")));
            }
        }
        if out == Objectives::default() {
            return Err(ObjectivesError("needs at least one objective".into()));
        }
        Ok(out)
    }
}

impl Objectives {
    /// Whether a successful request met every objective (a one-token answer has no TPOT and
    /// meets that one).
    pub fn met_by(&self, m: &Measured) -> bool {
        let within = |limit: Option<f64>, d: Option<std::time::Duration>| match (limit, d) {
            (Some(limit), Some(d)) => d.as_secs_f64() * 1e3 <= limit,
            _ => true,
        };
        within(self.ttft_ms, Some(m.ttft))
            && within(self.tpot_ms, m.tpot())
            && within(self.e2el_ms, Some(m.e2e))
    }
}

/// Requests that met the objectives, and their rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Goodput {
    pub objectives: Objectives,
    /// Successful requests within every objective.
    pub good_requests: usize,
    /// `good_requests` per second of the run.
    pub request_goodput: f64,
}

impl Goodput {
    pub(crate) fn of<'a>(
        objectives: Objectives,
        ok: impl Iterator<Item = &'a Measured>,
        secs: f64,
    ) -> Self {
        let good_requests = ok.filter(|m| objectives.met_by(m)).count();
        Goodput {
            objectives,
            good_requests,
            request_goodput: good_requests as f64 / secs,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn m(ttft: u64, e2e: u64, tokens: u64) -> Measured {
        Measured {
            ttft: Duration::from_millis(ttft),
            itl: Vec::new(),
            e2e: Duration::from_millis(e2e),
            content_chunks: tokens,
            usage_completion_tokens: Some(tokens),
            usage_prompt_tokens: Some(4),
            est_prompt_tokens: 4,
            retried: false,
            sent_at: Duration::ZERO,
        }
    }

    #[test]
    fn parses_pairs_and_refuses_bad_ones() {
        let o: Objectives = "ttft:500,tpot:50".parse().expect("parses");
        assert_eq!(
            (o.ttft_ms, o.tpot_ms, o.e2el_ms),
            (Some(500.0), Some(50.0), None)
        );
        let o: Objectives = "e2el:2000 ttft:1.5".parse().expect("spaces too");
        assert_eq!((o.ttft_ms, o.e2el_ms), (Some(1.5), Some(2000.0)));
        for bad in ["", "ttft", "ttft:-1", "ttft:abc", "itl:5", "ttft:1,ttft:2"] {
            assert!(bad.parse::<Objectives>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn counts_requests_within_every_objective() {
        let o: Objectives = "ttft:100,tpot:10".parse().expect("parses");
        // tpot = (e2e - ttft) / (tokens - 1)
        let runs = [
            m(80, 170, 10),  // tpot 10: good
            m(120, 200, 10), // ttft too slow
            m(50, 250, 11),  // tpot 20: too slow
            m(90, 90, 1),    // one token: no tpot, good
        ];
        let g = Goodput::of(o, runs.iter(), 2.0);
        assert_eq!(g.good_requests, 2);
        assert!((g.request_goodput - 1.0).abs() < 1e-12);
    }
}
