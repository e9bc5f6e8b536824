//! [`TraceParent`]: a W3C Trace Context `traceparent` (trace id, parent span id, flags), the
//! one piece of a distributed trace the engine carries. A request that has one is traced: the
//! engine reports the steps it takes part in ([`crate::step_trace`]) under that parent.
//!
//! The header is `VERSION-TRACE_ID-PARENT_ID-FLAGS` in lowercase hex (2, 32, 16 and 2
//! digits); version `ff` and all-zero ids are invalid, and a version above `00` may carry more
//! fields after the flags, which are ignored.

use std::fmt;

/// A parsed `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    /// The span the traced work is a child of.
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is "sampled".
    pub flags: u8,
}

/// Why a `traceparent` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid traceparent {0:?}: expected 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids")]
pub struct InvalidTraceParent(pub String);

impl TraceParent {
    /// Parses a `traceparent` header value.
    pub fn parse(value: &str) -> Result<TraceParent, InvalidTraceParent> {
        let bad = || InvalidTraceParent(value.chars().take(80).collect());
        let mut parts = value.trim().split('-');
        let (Some(version), Some(trace), Some(parent), Some(flags)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let version = hex::<1>(version).ok_or_else(bad)?[0];
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return Err(bad());
        }
        let parsed = TraceParent {
            trace_id: hex::<16>(trace).ok_or_else(bad)?,
            parent_id: hex::<8>(parent).ok_or_else(bad)?,
            flags: hex::<1>(flags).ok_or_else(bad)?[0],
        };
        if parsed.trace_id == [0; 16] || parsed.parent_id == [0; 8] {
            return Err(bad());
        }
        Ok(parsed)
    }

    /// The same trace with `span_id` as the parent (a child of this one's handing it on).
    pub fn with_parent(self, parent_id: [u8; 8]) -> TraceParent {
        TraceParent { parent_id, ..self }
    }

    /// Whether the sampled flag is set.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

impl fmt::Display for TraceParent {
    /// The header value, version `00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        self.trace_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        f.write_str("-")?;
        self.parent_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, "-{:02x}", self.flags)
    }
}

/// `N` bytes from exactly `2 * N` lowercase hex digits.
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let digits = s.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_and_prints_the_w3c_example() {
        let tp = TraceParent::parse(EXAMPLE).expect("valid");
        assert_eq!(tp.trace_id[0], 0x4b);
        assert_eq!(tp.parent_id[7], 0xb7);
        assert!(tp.sampled());
        assert_eq!(tp.to_string(), EXAMPLE);
    }

    #[test]
    fn refuses_malformed_values() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn later_versions_may_carry_more_fields() {
        let v = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        let tp = TraceParent::parse(v).expect("future version");
        assert!(!tp.sampled());
    }
}
