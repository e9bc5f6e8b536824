//! [`SharedBytes`]: a cheaply clonable, immutable byte range backed by a memory-mapped file or
//! an owned, 8-byte-aligned buffer. Weight tensors from GGUF and safetensors files are handed
//! out as `SharedBytes` so a model can keep slices of the mapping without copying.

use std::fs::File;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

enum Backing {
    Mapped(Mmap),
    /// `u64` words keep the buffer 8-byte aligned; `len` is the byte length.
    Owned {
        words: Vec<u64>,
        len: usize,
    },
}

impl Backing {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned { words, len } => &bytemuck::cast_slice(words)[..*len],
        }
    }
}

/// An immutable byte range that shares its backing storage.
#[derive(Clone)]
pub struct SharedBytes {
    backing: Arc<Backing>,
    range: Range<usize>,
}

impl SharedBytes {
    /// Memory-map `path` read-only.
    pub fn map_file(path: &Path) -> std::io::Result<SharedBytes> {
        let file = File::open(path)?;
        // SAFETY: the mapping is read-only and private to this process. Kestrel never writes
        // model files while serving them; if another process truncates the file underneath
        // us, reads fault (SIGBUS) instead of observing torn data — the same contract every
        // mmap-based model loader has.
        let map = unsafe { Mmap::map(&file)? };
        let len = map.len();
        Ok(SharedBytes {
            backing: Arc::new(Backing::Mapped(map)),
            range: 0..len,
        })
    }

    /// Take ownership of `bytes`, copying them into an 8-byte-aligned buffer.
    pub fn from_vec(bytes: Vec<u8>) -> SharedBytes {
        let len = bytes.len();
        let mut words = vec![0u64; len.div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len].copy_from_slice(&bytes);
        SharedBytes {
            backing: Arc::new(Backing::Owned { words, len }),
            range: 0..len,
        }
    }

    /// Build from `f32` values (little-endian).
    pub fn from_f32(values: &[f32]) -> SharedBytes {
        Self::from_vec(bytemuck::cast_slice(values).to_vec())
    }

    /// Drop this range's pages from the process's resident set if it is file-mapped (for weights
    /// that were copied elsewhere, e.g. repacked). The bytes stay readable: a later access reads
    /// them from the file again. Owned buffers are left as they are.
    pub fn release_resident(&self) {
        #[cfg(unix)]
        if let Backing::Mapped(map) = &*self.backing {
            if self.range.is_empty() {
                return;
            }
            // SAFETY: the mapping is private and read-only and Kestrel never writes through
            // it, so every page is clean: MADV_DONTNEED only unmaps pages, and the next access
            // faults in the same bytes from the file (page cache). No live reference observes
            // a change. The range is within the map (memmap2 widens it to whole pages, which
            // drops neighbouring pages the same harmless way).
            let res = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.range.start,
                    self.range.len(),
                )
            };
            // Only a hint: on failure the pages simply stay resident.
            drop(res);
        }
    }

    /// A sub-range, relative to this one; `None` if it is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Option<SharedBytes> {
        if range.start > range.end || range.end > self.range.len() {
            return None;
        }
        let start = self.range.start + range.start;
        Some(SharedBytes {
            backing: self.backing.clone(),
            range: start..start + range.len(),
        })
    }
}

impl Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.backing.as_bytes()[self.range.clone()]
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.range.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_and_bound_check() {
        let b = SharedBytes::from_vec((0u8..100).collect());
        let s = b.slice(10..20).unwrap();
        assert_eq!(&s[..], &(10u8..20).collect::<Vec<_>>()[..]);
        let t = s.slice(5..10).unwrap();
        assert_eq!(t[0], 15);
        assert!(s.slice(5..11).is_none());
        assert_eq!(b.as_ptr() as usize % 8, 0);
    }
}
