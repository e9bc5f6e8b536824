//! [`weights_bytes`]: how large a model's weights are on disk, the base of the memory estimate
//! a multi-model `kestrel serve` checks against `--models-memory-budget`.

use std::path::Path;

/// The size of a `.gguf` file, or of the weight files (`*.safetensors`, `*.bin`) of an HF
/// checkpoint directory; 0 for a path that cannot be read (its load reports why).
pub fn weights_bytes(path: &Path) -> u64 {
    if !path.is_dir() {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e == "safetensors" || e == "bin")
        })
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_counts_whole_and_a_directory_only_its_weight_files() {
        let dir = std::env::temp_dir().join(format!("kestrel-weights-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("model-00001.safetensors"), vec![0u8; 300]).unwrap();
        std::fs::write(dir.join("model-00002.safetensors"), vec![0u8; 200]).unwrap();
        std::fs::write(dir.join("tokenizer.json"), vec![0u8; 999]).unwrap();
        assert_eq!(weights_bytes(&dir), 500);
        assert_eq!(weights_bytes(&dir.join("tokenizer.json")), 999);
        assert_eq!(weights_bytes(&dir.join("missing.gguf")), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
