//! [`ModelList`]: the models a `kestrel serve` is asked to serve: each `--model` value (a
//! path, or `NAME=PATH`) and each model in `--models-dir` (a `.gguf` file or an HF checkpoint
//! directory, named by its file stem or directory name).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kestrel_server::model_registry::ModelEntry;

/// One `--model` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// A plain path (served under `--served-model-name` or its file stem).
    Path(PathBuf),
    /// `NAME=PATH`.
    Named(ModelEntry),
}

impl ModelSpec {
    /// `NAME=PATH` when the text before the first `=` is a name (no path separator) and the
    /// whole value is not an existing file; else a path.
    pub fn parse(value: &Path) -> ModelSpec {
        let text = value.to_string_lossy();
        let named = text.split_once('=').filter(|(name, path)| {
            !name.is_empty() && !name.contains(['/', '\\']) && !path.is_empty() && !value.exists()
        });
        match named {
            Some((name, path)) => ModelSpec::Named(ModelEntry {
                name: name.to_string(),
                path: PathBuf::from(path),
            }),
            None => ModelSpec::Path(value.to_path_buf()),
        }
    }
}

/// What `kestrel serve` was asked to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelList {
    /// One model, as always: a path, or `None` for the default model.
    Single(Option<PathBuf>),
    /// Several models (or one given as `NAME=PATH` or through `--models-dir`), by name.
    Several(Vec<ModelEntry>),
}

impl ModelList {
    /// The list from the `--model` values and `--models-dir`.
    pub fn from_args(models: &[PathBuf], dir: Option<&Path>) -> Result<ModelList> {
        let specs: Vec<ModelSpec> = models.iter().map(|m| ModelSpec::parse(m)).collect();
        if dir.is_none() {
            match specs.as_slice() {
                [] => return Ok(ModelList::Single(None)),
                [ModelSpec::Path(path)] => return Ok(ModelList::Single(Some(path.clone()))),
                _ => {}
            }
        }
        let mut entries = Vec::new();
        for spec in specs {
            match spec {
                ModelSpec::Named(entry) => entries.push(entry),
                ModelSpec::Path(path) => bail!(
                    "--model {}: with several models each needs a name: --model NAME=PATH",
                    path.display()
                ),
            }
        }
        if let Some(dir) = dir {
            entries.extend(models_in(dir)?);
        }
        if entries.is_empty() {
            bail!("no models to serve: --models-dir holds no .gguf file or model directory");
        }
        Ok(ModelList::Several(entries))
    }
}

/// Every `.gguf` file and HF checkpoint directory (one with a `config.json`) in `dir`, in
/// name order.
pub fn models_in(dir: &Path) -> Result<Vec<ModelEntry>> {
    let read = std::fs::read_dir(dir)
        .with_context(|| format!("--models-dir {}: cannot read it", dir.display()))?;
    let mut entries = Vec::new();
    for item in read {
        let path = item
            .with_context(|| format!("--models-dir {}", dir.display()))?
            .path();
        let is_gguf = path.is_file() && path.extension().is_some_and(|e| e == "gguf");
        let is_checkpoint = path.is_dir() && path.join("config.json").is_file();
        let name = match (is_gguf, is_checkpoint) {
            (true, _) => path.file_stem(),
            (_, true) => path.file_name(),
            _ => None,
        };
        if let Some(name) = name {
            entries.push(ModelEntry {
                name: name.to_string_lossy().into_owned(),
                path,
            });
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, path: &str) -> ModelEntry {
        ModelEntry {
            name: name.into(),
            path: path.into(),
        }
    }

    #[test]
    fn a_name_is_text_without_a_separator_before_the_first_equals() {
        assert_eq!(
            ModelSpec::parse(Path::new("a=/m/x.gguf")),
            ModelSpec::Named(entry("a", "/m/x.gguf"))
        );
        assert_eq!(
            ModelSpec::parse(Path::new("/m/a=b.gguf")),
            ModelSpec::Path("/m/a=b.gguf".into())
        );
        assert_eq!(
            ModelSpec::parse(Path::new("=x.gguf")),
            ModelSpec::Path("=x.gguf".into())
        );
        assert_eq!(
            ModelSpec::parse(Path::new("a=")),
            ModelSpec::Path("a=".into())
        );
    }

    #[test]
    fn one_plain_path_or_none_is_the_single_model_server() {
        assert_eq!(
            ModelList::from_args(&[], None).unwrap(),
            ModelList::Single(None)
        );
        let one = [PathBuf::from("/m/x.gguf")];
        assert_eq!(
            ModelList::from_args(&one, None).unwrap(),
            ModelList::Single(Some("/m/x.gguf".into()))
        );
        let named = [PathBuf::from("a=/m/x.gguf")];
        assert_eq!(
            ModelList::from_args(&named, None).unwrap(),
            ModelList::Several(vec![entry("a", "/m/x.gguf")])
        );
        let mixed = [PathBuf::from("a=/m/x.gguf"), PathBuf::from("/m/y.gguf")];
        let e = ModelList::from_args(&mixed, None).unwrap_err().to_string();
        assert!(e.contains("NAME=PATH"), "{e}");
    }

    #[test]
    fn a_models_dir_lists_gguf_files_and_checkpoint_directories() {
        let dir = std::env::temp_dir().join(format!("kestrel-models-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("hf-model")).unwrap();
        std::fs::write(dir.join("hf-model/config.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("not-a-model")).unwrap();
        std::fs::write(dir.join("b.gguf"), b"").unwrap();
        std::fs::write(dir.join("notes.txt"), b"").unwrap();
        let found = models_in(&dir).unwrap();
        let names: Vec<&str> = found.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["b", "hf-model"]);
        assert_eq!(found[0].path, dir.join("b.gguf"));
        let listed = ModelList::from_args(&[], Some(&dir)).unwrap();
        assert!(matches!(listed, ModelList::Several(ref v) if v.len() == 2));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(models_in(&dir).is_err(), "a missing directory is an error");
    }
}
