//! The API keys `kestrel serve` and `kestrel gateway` accept: `--api-key` (or
//! `KESTREL_API_KEY`) and `--api-key-file` (one key per line; blank lines and `#` comments
//! ignored). An empty key or a file without keys is an error: it would otherwise silently turn
//! authentication off.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// All configured keys; empty when neither option is given.
pub fn collect(key: Option<&str>, file: Option<&Path>) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    if let Some(key) = key {
        if key.trim().is_empty() {
            bail!("--api-key (or KESTREL_API_KEY) is empty: give a key, or unset it to serve without authentication");
        }
        keys.push(key.to_string());
    }
    if let Some(path) = file {
        keys.extend(read_file(path)?);
    }
    Ok(keys)
}

/// The keys listed in `path`.
fn read_file(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --api-key-file {}", path.display()))?;
    let keys = parse(&text);
    if keys.is_empty() {
        bail!(
            "--api-key-file {} holds no key (blank lines and # comments are ignored)",
            path.display()
        );
    }
    Ok(keys)
}

/// One key per non-blank line that does not start with `#`, trimmed.
fn parse(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_skips_blank_lines_and_comments() {
        let keys = parse("# keys\n\nsk-one\n  sk-two  \n#sk-off\n");
        assert_eq!(keys, ["sk-one", "sk-two"]);
    }

    #[test]
    fn an_empty_key_is_an_error() {
        assert!(collect(Some(""), None).is_err());
        assert!(collect(Some("  "), None).is_err());
        assert_eq!(collect(None, None).unwrap(), Vec::<String>::new());
    }
}
