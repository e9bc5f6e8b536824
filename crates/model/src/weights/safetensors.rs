//! Hugging Face safetensors checkpoints: [`SafetensorsCheckpoint`] opens a directory holding
//! `model.safetensors`, or `model.safetensors.index.json` plus the shards it names (or a single
//! `.safetensors` file), memory-maps every file through [`SharedBytes`] and serves F32, F16 and
//! BF16 tensors as [`TensorView`]s. I32 tensors (the packed codes of AWQ/GPTQ checkpoints) are
//! accepted too but only served raw, with every other tensor, by
//! [`SafetensorsCheckpoint::raw_tensor`].
//!
//! Headers are parsed and validated with the `safetensors` crate. Tensor data is served
//! straight from the mapping when it is 4-byte aligned; a misaligned tensor is copied once,
//! at open, into an owned aligned buffer.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use kestrel_kernels::{DType, SharedBytes};
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use super::{TensorSource, TensorView};

/// Name of a single-file checkpoint inside a model directory.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Name of the index of a sharded checkpoint inside a model directory.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// What errors call a checkpoint parsed from memory ([`SafetensorsCheckpoint::from_bytes`]).
pub const MEMORY_NAME: &str = "<memory>";

/// Why a safetensors checkpoint could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    #[error("no {SINGLE_FILE} or {INDEX_FILE} in {0}")]
    NotFound(PathBuf),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed index {path}: {reason}")]
    BadIndex { path: PathBuf, reason: String },
    #[error(
        "index {index} names shard {shard:?}, which is not a plain file name in the same directory"
    )]
    BadShardName { index: PathBuf, shard: String },
    #[error("shard {path} listed in the index does not exist")]
    MissingShard { path: PathBuf },
    #[error("malformed safetensors header in {path}: {source}")]
    BadHeader {
        path: PathBuf,
        #[source]
        source: SafeTensorError,
    },
    #[error(
        "tensor {name:?} in {path} has dtype {dtype}; Kestrel reads F32, F16, BF16 and (packed \
         quantized weights) I32"
    )]
    UnsupportedDtype {
        name: String,
        dtype: String,
        path: PathBuf,
    },
    #[error("the index maps tensor {name:?} to {shard:?}, but that shard does not contain it")]
    MissingTensor { name: String, shard: String },
    #[error("tensor {name:?} appears in both {first} and {second}")]
    DuplicateTensor {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
}

/// One tensor as stored, whatever its dtype: for reading packed quantized weights (I32 codes,
/// F16 scales) that are not [`TensorView`]s.
#[derive(Debug, Clone)]
pub struct RawTensor {
    pub name: String,
    /// The dtype as the safetensors header spells it: `"F32"`, `"F16"`, `"BF16"` or `"I32"`.
    pub dtype: String,
    /// Row-major shape, outermost dimension first.
    pub shape: Vec<usize>,
    /// Little-endian element bytes, 4-byte aligned.
    pub data: SharedBytes,
}

/// One stored tensor: its raw form, and its [`DType`] when it is a float tensor that
/// [`TensorSource`] serves.
#[derive(Debug)]
struct Entry {
    raw: RawTensor,
    float: Option<DType>,
}

/// The tensors of a (possibly sharded) safetensors checkpoint.
#[derive(Debug)]
pub struct SafetensorsCheckpoint {
    files: Vec<PathBuf>,
    tensors: Vec<Entry>,
    index: HashMap<String, usize>,
}

impl SafetensorsCheckpoint {
    /// Open the checkpoint in directory `path` (or the single `.safetensors` file `path`).
    pub fn open(path: &Path) -> Result<SafetensorsCheckpoint, SafetensorsError> {
        if path.is_file() {
            return Self::from_files(&[path.to_path_buf()], &HashMap::new());
        }
        let index_path = path.join(INDEX_FILE);
        if index_path.is_file() {
            let weight_map = read_index(&index_path)?;
            let shards = shard_paths(path, &index_path, &weight_map)?;
            return Self::from_files(&shards, &weight_map);
        }
        let single = path.join(SINGLE_FILE);
        if single.is_file() {
            return Self::from_files(&[single], &HashMap::new());
        }
        Err(SafetensorsError::NotFound(path.to_path_buf()))
    }

    /// Parse one safetensors file held in memory (`bytes`); errors name the file `<memory>`.
    /// The same validation as [`Self::open`], without touching the file system.
    pub fn from_bytes(bytes: SharedBytes) -> Result<SafetensorsCheckpoint, SafetensorsError> {
        let path = PathBuf::from(MEMORY_NAME);
        let tensors = entries(bytes, &path)?;
        let mut index = HashMap::with_capacity(tensors.len());
        for (i, entry) in tensors.iter().enumerate() {
            index.insert(entry.raw.name.clone(), i);
        }
        Ok(SafetensorsCheckpoint {
            files: vec![path],
            tensors,
            index,
        })
    }

    /// Load `files`, then check that every `weight_map` entry is in the shard it names.
    fn from_files(
        files: &[PathBuf],
        weight_map: &HashMap<String, String>,
    ) -> Result<SafetensorsCheckpoint, SafetensorsError> {
        let mut tensors = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut origin: Vec<usize> = Vec::new();
        for (file_idx, path) in files.iter().enumerate() {
            for entry in load_file(path)? {
                if let Some(&prev) = index.get(&entry.raw.name) {
                    return Err(SafetensorsError::DuplicateTensor {
                        name: entry.raw.name,
                        first: files[origin[prev]].clone(),
                        second: path.clone(),
                    });
                }
                index.insert(entry.raw.name.clone(), tensors.len());
                tensors.push(entry);
                origin.push(file_idx);
            }
        }
        for (name, shard) in weight_map {
            let found = index.get(name).map(|&i| &files[origin[i]]);
            if found.and_then(|p| p.file_name()) != Some(std::ffi::OsStr::new(shard)) {
                return Err(SafetensorsError::MissingTensor {
                    name: name.clone(),
                    shard: shard.clone(),
                });
            }
        }
        Ok(SafetensorsCheckpoint {
            files: files.to_vec(),
            tensors,
            index,
        })
    }

    /// The files this checkpoint was read from.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the checkpoint holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensor called `name` as stored, of any accepted dtype (I32 included).
    pub fn raw_tensor(&self, name: &str) -> Option<RawTensor> {
        self.index.get(name).map(|&i| self.tensors[i].raw.clone())
    }

    /// Names of every tensor, of any accepted dtype, in file order.
    pub fn raw_tensor_names(&self) -> Vec<String> {
        self.tensors.iter().map(|t| t.raw.name.clone()).collect()
    }

    /// Whether a tensor called `name` exists, of any accepted dtype.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }
}

/// The `weight_map` of a sharded checkpoint's index.
fn read_index(path: &Path) -> Result<HashMap<String, String>, SafetensorsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SafetensorsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |reason: String| SafetensorsError::BadIndex {
        path: path.to_path_buf(),
        reason,
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no \"weight_map\" object".to_string()))?;
    map.iter()
        .map(|(name, shard)| match shard.as_str() {
            Some(s) => Ok((name.clone(), s.to_string())),
            None => Err(bad(format!("weight_map entry {name:?} is not a string"))),
        })
        .collect()
}

/// The distinct shard files named by `weight_map`, in name order, checked to exist and to be
/// plain file names (no directory parts, so an index cannot point outside `dir`).
fn shard_paths(
    dir: &Path,
    index: &Path,
    weight_map: &HashMap<String, String>,
) -> Result<Vec<PathBuf>, SafetensorsError> {
    let names: BTreeSet<&String> = weight_map.values().collect();
    let mut out = Vec::with_capacity(names.len());
    for shard in names {
        let plain = Path::new(shard).file_name() == Some(std::ffi::OsStr::new(shard.as_str()));
        if !plain || shard == ".." || shard == "." {
            return Err(SafetensorsError::BadShardName {
                index: index.to_path_buf(),
                shard: shard.clone(),
            });
        }
        let path = dir.join(shard);
        if !path.is_file() {
            return Err(SafetensorsError::MissingShard { path });
        }
        out.push(path);
    }
    Ok(out)
}

/// Map one `.safetensors` file and return its tensors in file (offset) order.
fn load_file(path: &Path) -> Result<Vec<Entry>, SafetensorsError> {
    let bytes = SharedBytes::map_file(path).map_err(|source| SafetensorsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    entries(bytes, path)
}

/// The tensors of the safetensors file `bytes` (read from `path`), in file (offset) order.
fn entries(bytes: SharedBytes, path: &Path) -> Result<Vec<Entry>, SafetensorsError> {
    let (header_len, metadata) =
        SafeTensors::read_metadata(&bytes).map_err(|source| SafetensorsError::BadHeader {
            path: path.to_path_buf(),
            source,
        })?;
    // `read_metadata` checked that the header and all data offsets lie within the buffer.
    let data_start = 8 + header_len;
    let mut out = Vec::new();
    for name in metadata.offset_keys() {
        let Some(info) = metadata.info(&name) else {
            continue;
        };
        let float = match info.dtype {
            Dtype::F32 => Some(DType::F32),
            Dtype::F16 => Some(DType::F16),
            Dtype::BF16 => Some(DType::BF16),
            Dtype::I32 => None,
            other => {
                let dtype = format!("{other:?}");
                return Err(SafetensorsError::UnsupportedDtype {
                    name,
                    dtype,
                    path: path.to_path_buf(),
                });
            }
        };
        let (start, end) = info.data_offsets;
        let data = bytes
            .slice(data_start + start..data_start + end)
            .ok_or_else(|| SafetensorsError::BadHeader {
                path: path.to_path_buf(),
                source: SafeTensorError::InvalidOffset(name.clone()),
            })?;
        let raw = RawTensor {
            name,
            dtype: format!("{:?}", info.dtype),
            shape: info.shape.clone(),
            data: aligned(data),
        };
        out.push(Entry { raw, float });
    }
    Ok(out)
}

/// `data` itself if it starts on a 4-byte boundary, else an aligned owned copy.
fn aligned(data: SharedBytes) -> SharedBytes {
    if (data.as_ptr() as usize).is_multiple_of(4) {
        data
    } else {
        SharedBytes::from_vec(data.to_vec())
    }
}

impl TensorSource for SafetensorsCheckpoint {
    /// The float tensor called `name`; `None` for an I32 tensor (see [`Self::raw_tensor`]).
    fn tensor(&self, name: &str) -> Option<TensorView> {
        let entry = &self.tensors[*self.index.get(name)?];
        entry.float.map(|dtype| TensorView {
            name: entry.raw.name.clone(),
            dtype,
            shape: entry.raw.shape.clone(),
            data: entry.raw.data.clone(),
        })
    }

    /// The names of the float tensors, in file order.
    fn tensor_names(&self) -> Vec<String> {
        let floats = self.tensors.iter().filter(|t| t.float.is_some());
        floats.map(|t| t.raw.name.clone()).collect()
    }
}
