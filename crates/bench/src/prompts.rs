//! Prompts to send: synthetic ones of a given length, or lines of a JSONL file.
//!
//! Synthetic prompts are random sequences of common English words. Each word, preceded by a
//! space, is a single token in the BPE vocabularies of Llama, GPT-2, Qwen and SmolLM models, so a
//! prompt of `n` words is about `n` tokens; the server's `usage.prompt_tokens` (which also counts
//! BOS and chat-template tokens) is reported instead when it is returned.

use std::path::Path;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::error::BenchError;

/// One request's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSpec {
    /// Prompt text (the user message on the chat endpoint).
    pub text: String,
    /// Tokens to generate (`max_tokens`).
    pub output_len: u32,
    /// Estimated prompt tokens, used when the server does not report usage.
    pub est_prompt_tokens: u64,
}

/// Common words that are single tokens (with a leading space) in mainstream BPE vocabularies.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "way", "day", "man", "thing", "world", "life", "hand", "part", "child", "eye", "place", "work",
    "week", "case", "point", "number", "group", "problem", "fact", "good", "new", "first", "last",
    "long", "great", "little", "own", "other", "old", "right", "big", "high", "small", "large",
    "next", "early", "young", "few", "public", "same", "able", "know", "take", "see", "come",
    "think", "look", "want", "give", "use", "find", "tell", "ask", "seem", "feel", "try", "leave",
    "call", "water", "house", "city", "road", "river", "light", "music", "story", "game", "food",
];

/// `n` synthetic prompts of `input_len` words each, reproducible from `seed`.
pub fn synthetic(n: usize, input_len: usize, output_len: u32, seed: u64) -> Vec<PromptSpec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let words: Vec<&str> = (0..input_len)
                .filter_map(|_| WORDS.choose(&mut rng).copied())
                .collect();
            PromptSpec {
                text: words.join(" "),
                output_len,
                est_prompt_tokens: input_len as u64,
            }
        })
        .collect()
}

/// One line of a prompts file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptLine {
    prompt: String,
    output_len: Option<u32>,
}

/// Reads a JSONL prompts file; blank lines are skipped.
///
/// Returns `n` prompts (cycling through the file when `n` exceeds its length), or every line
/// when `n` is `None`. A line without `output_len` gets `default_output_len`. The token estimate
/// of a file prompt is its number of whitespace-separated words.
pub fn from_jsonl(
    path: &Path,
    n: Option<usize>,
    default_output_len: u32,
) -> Result<Vec<PromptSpec>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::PromptsFileIo {
        path: path.to_owned(),
        source,
    })?;
    let mut lines = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |message: String| BenchError::PromptsFileFormat {
            path: path.to_owned(),
            line: i + 1,
            message,
        };
        let parsed: PromptLine = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        if parsed.output_len == Some(0) {
            return Err(bad("output_len must be at least 1".into()));
        }
        lines.push(PromptSpec {
            est_prompt_tokens: parsed.prompt.split_whitespace().count() as u64,
            text: parsed.prompt,
            output_len: parsed.output_len.unwrap_or(default_output_len),
        });
    }
    if lines.is_empty() {
        return Err(BenchError::PromptsFileFormat {
            path: path.to_owned(),
            line: 0,
            message: "the file holds no prompts".into(),
        });
    }
    let n = n.unwrap_or(lines.len());
    Ok(lines.iter().cycle().take(n).cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, body: &str) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("kestrel-bench-{}-{name}", std::process::id()));
        std::fs::write(&path, body).unwrap();
        path
    }

    #[test]
    fn synthetic_prompts_have_the_requested_length_and_are_seeded() {
        let a = synthetic(5, 100, 32, 1);
        assert_eq!(a.len(), 5);
        for p in &a {
            assert_eq!(p.text.split(' ').count(), 100);
            assert_eq!((p.output_len, p.est_prompt_tokens), (32, 100));
        }
        assert_ne!(a[0].text, a[1].text, "prompts of one run differ");
        assert_eq!(a, synthetic(5, 100, 32, 1));
        assert_ne!(a, synthetic(5, 100, 32, 2));
    }

    #[test]
    fn words_are_plain_lowercase_ascii() {
        assert!(WORDS
            .iter()
            .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase())));
    }

    #[test]
    fn jsonl_lines_with_and_without_output_len() {
        let path = temp_file(
            "ok.jsonl",
            "{\"prompt\": \"a b c\", \"output_len\": 7}\n\n{\"prompt\": \"d\"}\n",
        );
        let got = from_jsonl(&path, None, 16).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].output_len, got[0].est_prompt_tokens), (7, 3));
        assert_eq!((got[1].text.as_str(), got[1].output_len), ("d", 16));
        let cycled = from_jsonl(&path, Some(5), 16).unwrap();
        assert_eq!(cycled.len(), 5);
        assert_eq!(cycled[4], got[0]);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn jsonl_errors_name_the_line() {
        let path = temp_file(
            "bad.jsonl",
            "{\"prompt\": \"ok\"}\n{\"text\": \"no prompt\"}\n",
        );
        match from_jsonl(&path, None, 16) {
            Err(BenchError::PromptsFileFormat { line, .. }) => assert_eq!(line, 2),
            other => panic!("expected a format error, got {other:?}"),
        }
        std::fs::remove_file(path).unwrap();
        let missing = Path::new("/nonexistent/kestrel/prompts.jsonl");
        assert!(matches!(
            from_jsonl(missing, None, 1),
            Err(BenchError::PromptsFileIo { .. })
        ));
    }
}
