//! [`WeightsDigest`]: the SHA-256 of what a model is loaded from, so that two processes can
//! tell whether they run the same weights without comparing paths. A GGUF file is hashed
//! whole; an HF checkpoint directory is hashed as the names and contents of its top-level,
//! non-hidden regular files in name order (config, tokenizer, every safetensors shard).
//!
//! Hashing a multi-gigabyte model takes seconds, so the result is cached beside the weights
//! (`<file>.kestrel-digest.json`, or `.kestrel-digest.json` inside a checkpoint directory)
//! together with each file's size and modification time; a cache whose files changed is
//! ignored and rewritten. Where the weights' folder is read-only the cache goes under
//! `$XDG_CACHE_HOME/kestrel/digests/` (else `~/.cache/...`); where neither can be written the
//! digest is recomputed on each start.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The name of the cache file beside a GGUF file's name, and inside a checkpoint directory.
const SIDECAR_SUFFIX: &str = ".kestrel-digest.json";

/// The hex SHA-256 of a model's weights.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WeightsDigest(pub String);

impl std::fmt::Display for WeightsDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why the weights could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} holds no file to hash")]
    Empty(PathBuf),
}

/// One hashed file as the cache records it: a changed size or time invalidates the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    name: String,
    size: u64,
    modified_ns: u128,
}

/// The cache file's content.
#[derive(Debug, Serialize, Deserialize)]
struct Cached {
    files: Vec<Stamp>,
    sha256: String,
}

impl WeightsDigest {
    /// The digest of the weights at `path` (a file or a checkpoint directory), from the cache
    /// when its files are unchanged, else computed and cached.
    pub fn of(path: &Path) -> Result<WeightsDigest, DigestError> {
        let files = files_of(path)?;
        let stamps = files
            .iter()
            .map(|f| stamp(f))
            .collect::<Result<Vec<_>, _>>()?;
        let places = cache_places(path);
        if let Some(hit) = places.iter().find_map(|p| read_cache(p, &stamps)) {
            return Ok(hit);
        }
        let digest = compute(path, &files)?;
        let cached = Cached {
            files: stamps,
            sha256: digest.0.clone(),
        };
        if !places.iter().any(|p| write_cache(p, &cached)) {
            tracing::debug!(path = %path.display(), "cannot cache the weights digest anywhere");
        }
        Ok(digest)
    }

    /// The digest computed afresh, ignoring and leaving every cache alone.
    pub fn compute(path: &Path) -> Result<WeightsDigest, DigestError> {
        compute(path, &files_of(path)?)
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> DigestError + '_ {
    move |source| DigestError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The files that make up the weights, in hashing order.
fn files_of(path: &Path) -> Result<Vec<PathBuf>, DigestError> {
    let meta = fs::metadata(path).map_err(io_error(path))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in fs::read_dir(path).map_err(io_error(path))? {
        let entry = entry.map_err(io_error(path))?;
        let name = entry.file_name();
        let hidden = name.to_string_lossy().starts_with('.');
        let is_file = entry.file_type().map_err(io_error(path))?.is_file();
        if is_file && !hidden {
            files.push(entry.path());
        }
    }
    if files.is_empty() {
        return Err(DigestError::Empty(path.to_path_buf()));
    }
    files.sort();
    Ok(files)
}

fn stamp(file: &Path) -> Result<Stamp, DigestError> {
    let meta = fs::metadata(file).map_err(io_error(file))?;
    let modified_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Ok(Stamp {
        name: file_name(file),
        size: meta.len(),
        modified_ns,
    })
}

fn file_name(file: &Path) -> String {
    file.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// SHA-256 over each file's length and bytes, each preceded by its name when `path` is a
/// checkpoint directory (names and lengths framed so that no two different file sets hash
/// alike).
fn compute(path: &Path, files: &[PathBuf]) -> Result<WeightsDigest, DigestError> {
    let named = path.is_dir();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for file in files {
        let mut f = fs::File::open(file).map_err(io_error(file))?;
        let len = f.metadata().map_err(io_error(file))?.len();
        if named {
            let name = file_name(file);
            hasher.update((name.len() as u64).to_le_bytes());
            hasher.update(name.as_bytes());
        }
        hasher.update(len.to_le_bytes());
        loop {
            let n = f.read(&mut buf).map_err(io_error(file))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
    }
    Ok(WeightsDigest(hex(&hasher.finalize())))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the cache of `path` may live, first choice first.
fn cache_places(path: &Path) -> Vec<PathBuf> {
    let beside = if path.is_dir() {
        path.join(SIDECAR_SUFFIX)
    } else {
        let mut name = path.as_os_str().to_os_string();
        name.push(SIDECAR_SUFFIX);
        PathBuf::from(name)
    };
    let mut places = vec![beside];
    if let Some(dir) = user_cache_dir() {
        let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let key = hex(&Sha256::digest(canonical.to_string_lossy().as_bytes()));
        places.push(
            dir.join("kestrel")
                .join("digests")
                .join(format!("{key}.json")),
        );
    }
    places
}

fn user_cache_dir() -> Option<PathBuf> {
    match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")),
    }
}

fn read_cache(place: &Path, stamps: &[Stamp]) -> Option<WeightsDigest> {
    let text = fs::read_to_string(place).ok()?;
    let cached: Cached = serde_json::from_str(&text).ok()?;
    (cached.files == stamps && cached.sha256.len() == 64).then_some(WeightsDigest(cached.sha256))
}

/// Writes the cache through a temporary file and a rename, so that a reader never sees half
/// of it; false where `place` cannot be written.
fn write_cache(place: &Path, cached: &Cached) -> bool {
    let Ok(json) = serde_json::to_string(cached) else {
        return false;
    };
    if let Some(dir) = place.parent() {
        if fs::create_dir_all(dir).is_err() {
            return false;
        }
    }
    let mut tmp = place.as_os_str().to_os_string();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = fs::write(&tmp, json).and_then(|()| fs::rename(&tmp, place));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "kestrel-digest-{}-{name}-{}",
            std::process::id(),
            rand_suffix()
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn rand_suffix() -> u128 {
        std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    }

    #[test]
    fn a_file_digest_is_the_sha256_of_its_content_and_is_cached_beside_it() {
        let dir = scratch("file");
        let file = dir.join("m.gguf");
        fs::write(&file, b"weights").unwrap();
        let first = WeightsDigest::of(&file).unwrap();
        let mut expected = Sha256::new();
        expected.update(7u64.to_le_bytes());
        expected.update(b"weights");
        assert_eq!(first.0, hex(&expected.finalize()));
        let sidecar = dir.join("m.gguf.kestrel-digest.json");
        assert!(sidecar.exists(), "the digest is cached beside the file");
        // A forged cache for the same stamps is believed: proof the cache is read, not redone.
        let text = fs::read_to_string(&sidecar).unwrap();
        let forged = text.replace(&first.0, &"a".repeat(64));
        fs::write(&sidecar, forged).unwrap();
        assert_eq!(WeightsDigest::of(&file).unwrap().0, "a".repeat(64));
        assert_eq!(WeightsDigest::compute(&file).unwrap(), first);
        // A renamed copy is the same weights.
        let copy = dir.join("renamed.gguf");
        fs::copy(&file, &copy).unwrap();
        assert_eq!(WeightsDigest::of(&copy).unwrap(), first);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_changed_file_invalidates_the_cache() {
        let dir = scratch("change");
        let file = dir.join("m.gguf");
        fs::write(&file, b"one").unwrap();
        let one = WeightsDigest::of(&file).unwrap();
        fs::write(&file, b"two!").unwrap();
        let two = WeightsDigest::of(&file).unwrap();
        assert_ne!(one, two);
        assert_eq!(two, WeightsDigest::compute(&file).unwrap());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checkpoint_directory_hashes_its_visible_files_in_name_order() {
        let dir = scratch("dir");
        fs::write(dir.join("config.json"), b"{}").unwrap();
        fs::write(dir.join("model.safetensors"), b"tensors").unwrap();
        let a = WeightsDigest::of(&dir).unwrap();
        assert!(dir.join(SIDECAR_SUFFIX).exists());
        // The cache file (hidden) does not change the digest of the directory.
        assert_eq!(WeightsDigest::compute(&dir).unwrap(), a);
        fs::write(dir.join("tokenizer.json"), b"{\"v\":1}").unwrap();
        let b = WeightsDigest::of(&dir).unwrap();
        assert_ne!(a, b, "a new file is part of the checkpoint");
        // Content moved between two files with the same bytes overall is still a change.
        fs::write(dir.join("config.json"), b"{}t").unwrap();
        fs::write(dir.join("model.safetensors"), b"ensors").unwrap();
        assert_ne!(WeightsDigest::of(&dir).unwrap(), b);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_path_and_an_empty_directory_are_errors() {
        let dir = scratch("empty");
        assert!(matches!(
            WeightsDigest::of(&dir.join("nope.gguf")),
            Err(DigestError::Io { .. })
        ));
        assert!(matches!(
            WeightsDigest::of(&dir),
            Err(DigestError::Empty(_))
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
