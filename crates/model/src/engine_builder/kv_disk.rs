//! The KV disk tier an engine opens ([`KvDiskOptions`]), and the fingerprint that keeps one
//! model's blocks from ever being served to another.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use kestrel_engine::kv::disk_tier::{DiskTier, TierFingerprint};
use sha2::{Digest, Sha256};

use super::EngineBuildError;
use crate::arch::DecoderModel;
use crate::kv_cache::KvCacheShape;

/// How the layout of a block's bytes is defined (bump when `KvCache` changes it).
const KV_LAYOUT: &str = "kv-layout-1";
/// Bytes sampled from each end of a weights file for its identity.
const SAMPLE: u64 = 1 << 20;

/// Where the KV disk tier lives and how large it may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvDiskOptions {
    pub dir: PathBuf,
    pub budget_bytes: u64,
}

/// Opens the tier for `model`, loaded from `path`, with a KV cache of `shape`.
pub(super) fn open_tier(
    opts: &KvDiskOptions,
    path: &Path,
    model: &DecoderModel,
    shape: KvCacheShape,
) -> Result<DiskTier, EngineBuildError> {
    let identity = model_identity(path).map_err(|source| EngineBuildError::ModelIdentity {
        path: path.to_path_buf(),
        source,
    })?;
    let description = format!(
        "{KV_LAYOUT}; weights {identity}; {} weight bytes per token; KV {} x {} heads x {} dims, \
         {} dtype, {}-token blocks",
        model.token_weight_bytes(),
        shape.n_layers,
        shape.n_kv_heads,
        shape.head_dim,
        shape.dtype.name(),
        shape.block_size,
    );
    let fingerprint = TierFingerprint::of(&description);
    Ok(DiskTier::open(&opts.dir, fingerprint, opts.budget_bytes)?)
}

/// What names a model's weights: for each file (a GGUF, or a checkpoint directory's files in
/// name order), its name, length and a SHA-256 of its first and last MiB.
fn model_identity(path: &Path) -> std::io::Result<String> {
    let mut files = match path.is_dir() {
        true => std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<Vec<_>>>()?,
        false => vec![path.to_path_buf()],
    };
    files.retain(|f| f.is_file());
    files.sort();
    let mut parts = Vec::with_capacity(files.len());
    for file in files {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        parts.push(format!(
            "{}:{}",
            name.unwrap_or_default(),
            file_digest(&file)?
        ));
    }
    Ok(parts.join(","))
}

/// A file's length and the SHA-256 of its first and last [`SAMPLE`] bytes, in hex.
fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut h = Sha256::new();
    let mut buf = Vec::new();
    (&mut file).take(SAMPLE).read_to_end(&mut buf)?;
    h.update(&buf);
    if len > SAMPLE {
        buf.clear();
        file.seek(SeekFrom::Start(len.saturating_sub(SAMPLE).max(SAMPLE)))?;
        file.take(SAMPLE).read_to_end(&mut buf)?;
        h.update(&buf);
    }
    let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{len}:{digest}"))
}
