//! The file that holds one KV block on disk: a fixed header, then the block's bytes.
//!
//! ```text
//! offset  size  field
//!      0     8  magic b"KSTKVBLK"
//!      8     4  format version (u32 LE, 1)
//!     12     4  reserved (0)
//!     16    32  tier fingerprint (model, weights, KV dtype and geometry)
//!     48    32  block hash (the chained prefix hash, salt and adapter included)
//!     80     8  payload length in bytes (u64 LE)
//!     88     4  CRC-32 of the payload
//!     92     4  CRC-32 of bytes 0..92
//!     96     -  payload
//! ```
//!
//! Every field is checked before a payload is served: a torn, truncated, corrupted or foreign
//! file is an error, never a block.

use super::TierFingerprint;
use crate::kv::BlockHash;

const MAGIC: &[u8; 8] = b"KSTKVBLK";
const VERSION: u32 = 1;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 96;

/// Why a block file cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockFileError {
    #[error("shorter than its header or its stated length")]
    Truncated,
    #[error("not a Kestrel KV block file")]
    BadMagic,
    #[error("format version {0} (this build reads {VERSION})")]
    Version(u32),
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("written for another model or KV layout")]
    Foreign,
    #[error("holds another block than its name says")]
    WrongBlock,
    #[error("payload checksum mismatch")]
    PayloadChecksum,
}

/// What a block file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub hash: BlockHash,
    pub payload_len: u64,
    payload_crc: u32,
}

/// The header of a file holding `payload` as block `hash`.
pub fn header(fingerprint: &TierFingerprint, hash: &BlockHash, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(fingerprint.as_bytes());
    h.extend_from_slice(hash.as_bytes());
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    h.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// Reads and checks a header (not the payload) against this tier's fingerprint.
pub fn read_header(
    bytes: &[u8],
    fingerprint: &TierFingerprint,
) -> Result<BlockHeader, BlockFileError> {
    let h = bytes.get(..HEADER_LEN).ok_or(BlockFileError::Truncated)?;
    if &h[..8] != MAGIC {
        return Err(BlockFileError::BadMagic);
    }
    let version = u32_at(h, 8);
    if version != VERSION {
        return Err(BlockFileError::Version(version));
    }
    if crc32fast::hash(&h[..92]) != u32_at(h, 92) {
        return Err(BlockFileError::HeaderChecksum);
    }
    if &h[16..48] != fingerprint.as_bytes() {
        return Err(BlockFileError::Foreign);
    }
    Ok(BlockHeader {
        hash: BlockHash::from_bytes(array(h, 48)),
        payload_len: u64::from_le_bytes(array(h, 80)),
        payload_crc: u32_at(h, 88),
    })
}

/// The payload of a whole block file, every field checked: it must be block `expected`.
pub fn decode(
    mut bytes: Vec<u8>,
    fingerprint: &TierFingerprint,
    expected: &BlockHash,
) -> Result<Vec<u8>, BlockFileError> {
    let header = read_header(&bytes, fingerprint)?;
    if &header.hash != expected {
        return Err(BlockFileError::WrongBlock);
    }
    if (bytes.len() - HEADER_LEN) as u64 != header.payload_len {
        return Err(BlockFileError::Truncated);
    }
    if crc32fast::hash(&bytes[HEADER_LEN..]) != header.payload_crc {
        return Err(BlockFileError::PayloadChecksum);
    }
    bytes.drain(..HEADER_LEN);
    Ok(bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(array(bytes, at))
}

/// `N` bytes of `bytes` from `at` (within the header, whose length was checked).
fn array<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(fp: &TierFingerprint, hash: &BlockHash, payload: &[u8]) -> Vec<u8> {
        let mut f = header(fp, hash, payload);
        f.extend_from_slice(payload);
        f
    }

    fn setup() -> (TierFingerprint, BlockHash, Vec<u8>) {
        let fp = TierFingerprint::of("model a");
        let hash = BlockHash::new(None, &[1, 2, 3], None, None);
        (fp, hash, (0..=255u8).cycle().take(1000).collect())
    }

    #[test]
    fn a_written_block_reads_back() {
        let (fp, hash, payload) = setup();
        let got = decode(file(&fp, &hash, &payload), &fp, &hash).unwrap();
        assert_eq!(got, payload);
    }

    #[test]
    fn every_damage_is_refused() {
        let (fp, hash, payload) = setup();
        let good = file(&fp, &hash, &payload);
        let other = BlockHash::new(None, &[9], None, None);
        let other_fp = TierFingerprint::of("model b");
        let cases: Vec<(Vec<u8>, &TierFingerprint, &BlockHash, BlockFileError)> = vec![
            (good[..50].to_vec(), &fp, &hash, BlockFileError::Truncated),
            (
                good[..good.len() - 1].to_vec(),
                &fp,
                &hash,
                BlockFileError::Truncated,
            ),
            (
                {
                    let mut f = good.clone();
                    f[HEADER_LEN + 7] ^= 1;
                    f
                },
                &fp,
                &hash,
                BlockFileError::PayloadChecksum,
            ),
            (
                {
                    let mut f = good.clone();
                    f[60] ^= 1;
                    f
                },
                &fp,
                &hash,
                BlockFileError::HeaderChecksum,
            ),
            (
                {
                    let mut f = good.clone();
                    f[0] = b'X';
                    f
                },
                &fp,
                &hash,
                BlockFileError::BadMagic,
            ),
            (good.clone(), &other_fp, &hash, BlockFileError::Foreign),
            (good.clone(), &fp, &other, BlockFileError::WrongBlock),
        ];
        for (i, (bytes, fp, expected, err)) in cases.into_iter().enumerate() {
            assert_eq!(decode(bytes, fp, expected), Err(err), "case {i}");
        }
    }
}
