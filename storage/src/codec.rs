//! Hand-written record encodings. Everything read back from disk is checked;
//! a record that does not decode is a [`StorageError`], never a panic.
//!
//! A stored version (its mod revision is the table key):
//!
//! ```text
//! flags: u8                bit 0 = tombstone; the other bits 0101101
//!                          (checksummed, as every record written now)
//!                          or all 0 (written before checksums)
//! key length: varint       LEB128
//! key: bytes
//! create_revision: varint  zigzag LEB128 of the i64
//! version: varint
//! lease: varint
//! value: bytes             the rest of the record, less the checksum
//! checksum: u32 LE         CRC-32C of the table key (16 bytes LE) and
//!                          every byte above; when checksummed
//! ```
//!
//! Every record written carries the checksum, so a flipped bit in a value,
//! a key or the revision it is stored at is refused on read, never served
//! (redb itself checks its page checksums only when it repairs a file).
//! Records written before checksums were added are read as they are; the
//! two flag patterns differ in four bits, so no single flipped bit turns a
//! checksummed record into one that is not.

use oxetcd_core::storage::{KvMeta, LeaseRecord, StorageError};

use crate::crc32c::Crc32c;

const FLAG_TOMBSTONE: u8 = 1;
/// The flag bits of a checksummed record (bit 0 is the tombstone).
const FLAG_CHECKSUM: u8 = 0x5a;
/// The checksum's bytes at the end of a record.
const CHECKSUM_BYTES: usize = 4;

/// A [`RevisionRecord`]'s name in a [`StorageError::Corrupt`].
const VERSION_RECORD: &str = "version record";

/// The fields of a version that are not part of its table key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RevisionRecord<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) create_revision: i64,
    pub(crate) version: i64,
    pub(crate) lease: i64,
    pub(crate) tombstone: bool,
    pub(crate) value: &'a [u8],
}

/// The checksum of a record stored under `table_key` whose bytes before
/// the checksum are `body`.
fn record_checksum(table_key: u128, body: &[u8]) -> u32 {
    let mut crc = Crc32c::default();
    crc.update(&table_key.to_le_bytes());
    crc.update(body);
    crc.sum()
}

impl RevisionRecord<'_> {
    /// The record as stored under `table_key`, with its checksum.
    pub(crate) fn encode(&self, table_key: u128) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(1 + 4 * 10 + self.key.len() + self.value.len() + CHECKSUM_BYTES);
        let tombstone = if self.tombstone { FLAG_TOMBSTONE } else { 0 };
        out.push(tombstone | FLAG_CHECKSUM);
        put_varint(&mut out, self.key.len() as u64);
        out.extend_from_slice(self.key);
        put_varint(&mut out, zigzag(self.create_revision));
        put_varint(&mut out, zigzag(self.version));
        put_varint(&mut out, zigzag(self.lease));
        out.extend_from_slice(self.value);
        let checksum = record_checksum(table_key, &out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }
}

impl<'a> RevisionRecord<'a> {
    /// Decodes the record stored under `table_key`, checking its checksum.
    pub(crate) fn decode(bytes: &'a [u8], table_key: u128) -> Result<Self, StorageError> {
        Self::decode_checked(bytes, Some(table_key)).map_err(|e| at_revision(e, table_key))
    }

    /// Decodes a record without checking its checksum: for the key index
    /// built at open, where a record whose checksum fails still names its
    /// key (the reads that serve it check, and refuse it).
    pub(crate) fn decode_unverified(bytes: &'a [u8]) -> Result<Self, StorageError> {
        Self::decode_checked(bytes, None)
    }

    fn decode_checked(bytes: &'a [u8], table_key: Option<u128>) -> Result<Self, StorageError> {
        let (&flags, _) = bytes
            .split_first()
            .ok_or_else(|| StorageError::corrupt(VERSION_RECORD, "empty"))?;
        let bytes = if flags & !FLAG_TOMBSTONE == FLAG_CHECKSUM {
            let split = bytes.len().checked_sub(CHECKSUM_BYTES).ok_or_else(|| {
                StorageError::corrupt(VERSION_RECORD, "too short for its checksum")
            })?;
            let (body, stored) = bytes.split_at(split);
            if let Some(table_key) = table_key {
                let mut word = [0u8; CHECKSUM_BYTES];
                word.copy_from_slice(stored);
                let stored = u32::from_le_bytes(word);
                let computed = record_checksum(table_key, body);
                if stored != computed {
                    return Err(StorageError::corrupt(
                        VERSION_RECORD,
                        format_args!(
                            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x} \
                             (the backend file is damaged)"
                        ),
                    ));
                }
            }
            body
        } else {
            bytes
        };
        let (&flags, mut rest) = bytes
            .split_first()
            .ok_or_else(|| StorageError::corrupt(VERSION_RECORD, "empty"))?;
        let flags = if flags & !FLAG_TOMBSTONE == FLAG_CHECKSUM {
            flags & FLAG_TOMBSTONE
        } else {
            flags
        };
        if flags & !FLAG_TOMBSTONE != 0 {
            return Err(StorageError::corrupt(
                VERSION_RECORD,
                format_args!("unknown flags {flags:#04x}"),
            ));
        }
        let key_len = take_varint(&mut rest)?;
        let key_len = usize::try_from(key_len)
            .ok()
            .filter(|&n| n <= rest.len())
            .ok_or_else(|| {
                StorageError::corrupt(
                    VERSION_RECORD,
                    format_args!("key of {key_len} bytes in {} left", rest.len()),
                )
            })?;
        let (key, mut rest) = rest.split_at(key_len);
        let create_revision = unzigzag(take_varint(&mut rest)?);
        let version = unzigzag(take_varint(&mut rest)?);
        let lease = unzigzag(take_varint(&mut rest)?);
        Ok(Self {
            key,
            create_revision,
            version,
            lease,
            tombstone: flags & FLAG_TOMBSTONE != 0,
            value: rest,
        })
    }
}

/// `error`, when it is a version record's, naming the revision the record
/// is stored at (`table_key`).
pub(crate) fn at_revision(error: StorageError, table_key: u128) -> StorageError {
    match error {
        StorageError::Corrupt {
            path,
            record,
            detail,
        } => StorageError::Corrupt {
            path,
            record: format!(
                "{record} at revision {}.{}",
                (table_key >> 64) as u64,
                table_key as u64
            ),
            detail,
        },
        other => other,
    }
}

/// A lease's TTL and remaining TTL as two little-endian 64-bit words (its
/// ID is the table key).
pub(crate) fn encode_lease(lease: &LeaseRecord) -> [u8; 16] {
    let mut out = [0; 16];
    out[0..8].copy_from_slice(&lease.ttl_secs.to_le_bytes());
    out[8..16].copy_from_slice(&lease.remaining_ttl_secs.to_le_bytes());
    out
}

pub(crate) fn decode_lease(id: i64, bytes: &[u8]) -> Result<LeaseRecord, StorageError> {
    let bytes: &[u8; 16] = bytes.try_into().map_err(|_| {
        StorageError::corrupt(
            format_args!("lease record {id:x}"),
            format_args!("{} bytes", bytes.len()),
        )
    })?;
    let word = |i: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        i64::from_le_bytes(w)
    };
    Ok(LeaseRecord {
        id,
        ttl_secs: word(0),
        remaining_ttl_secs: word(1),
    })
}

/// [`KvMeta`] as four little-endian 64-bit words.
pub(crate) fn encode_kv_meta(meta: &KvMeta) -> [u8; 32] {
    let mut out = [0; 32];
    out[0..8].copy_from_slice(&meta.applied_index.to_le_bytes());
    out[8..16].copy_from_slice(&meta.applied_term.to_le_bytes());
    out[16..24].copy_from_slice(&meta.revision.to_le_bytes());
    out[24..32].copy_from_slice(&meta.compact_revision.to_le_bytes());
    out
}

pub(crate) fn decode_kv_meta(bytes: &[u8]) -> Result<KvMeta, StorageError> {
    let bytes: &[u8; 32] = bytes.try_into().map_err(|_| {
        StorageError::corrupt("kv meta record", format_args!("{} bytes", bytes.len()))
    })?;
    let word = |i: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        w
    };
    Ok(KvMeta {
        applied_index: u64::from_le_bytes(word(0)),
        applied_term: u64::from_le_bytes(word(1)),
        revision: i64::from_le_bytes(word(2)),
        compact_revision: i64::from_le_bytes(word(3)),
    })
}

/// A little-endian u64 record.
pub(crate) fn decode_u64(what: &str, bytes: &[u8]) -> Result<u64, StorageError> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_le_bytes)
        .map_err(|_| {
            StorageError::corrupt(
                format_args!("{what} record"),
                format_args!("{} bytes", bytes.len()),
            )
        })
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn take_varint(bytes: &mut &[u8]) -> Result<u64, StorageError> {
    let mut n = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        let bits = u64::from(b & 0x7f);
        // The tenth byte may carry only the top bit of a u64.
        if i == 9 && bits > 1 {
            break;
        }
        n |= bits << (7 * i);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Ok(n);
        }
    }
    Err(StorageError::corrupt(VERSION_RECORD, "bad varint"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_record_roundtrip() {
        for (key, create_revision, version, lease, tombstone, value) in [
            (&b""[..], 0, 0, 0, true, &b""[..]),
            (b"k", 1, 1, 0, false, b"v"),
            (
                &[0xff; 200][..],
                i64::MAX,
                i64::MAX,
                i64::MIN,
                false,
                &[0xff; 300][..],
            ),
            (b"key", -1, 127, 128, false, b""),
        ] {
            let record = RevisionRecord {
                key,
                create_revision,
                version,
                lease,
                tombstone,
                value,
            };
            let bytes = record.encode(7);
            assert_eq!(RevisionRecord::decode(&bytes, 7).unwrap(), record);
            assert_eq!(RevisionRecord::decode_unverified(&bytes).unwrap(), record);
        }
        let small = RevisionRecord {
            key: b"k",
            create_revision: 5,
            version: 1,
            lease: 0,
            tombstone: false,
            value: b"",
        };
        assert_eq!(small.encode(7).len(), 6 + CHECKSUM_BYTES);
        // A record written before checksums reads as it is.
        let mut old = small.encode(7);
        old.truncate(6);
        old[0] &= !FLAG_CHECKSUM;
        assert_eq!(RevisionRecord::decode(&old, 7).unwrap(), small);
    }

    /// A flipped bit anywhere in a record, or the record read at another
    /// revision than it was stored at, is refused.
    #[test]
    fn a_damaged_record_fails_its_checksum() {
        let record = RevisionRecord {
            key: b"key",
            create_revision: 2,
            version: 1,
            lease: 0,
            tombstone: false,
            value: b"value",
        };
        let bytes = record.encode(9);
        assert!(
            RevisionRecord::decode(&bytes, 10).is_err(),
            "another revision"
        );
        for at in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[at / 8] ^= 1 << (at % 8);
            let decoded = RevisionRecord::decode(&damaged, 9);
            assert!(decoded.is_err(), "bit {at} passed");
        }
    }

    #[test]
    fn corrupt_revision_records_are_errors() {
        assert!(RevisionRecord::decode(b"", 0).is_err());
        // Unknown flag.
        assert!(RevisionRecord::decode(&[4, 0, 0, 0, 0], 0).is_err());
        // Too short for its checksum.
        assert!(RevisionRecord::decode(&[2, 0, 0], 0).is_err());
        // Key longer than the record.
        assert!(RevisionRecord::decode(&[0, 5, b'a', 0, 0, 0], 0).is_err());
        assert!(RevisionRecord::decode(
            &[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            0
        )
        .is_err());
        // Truncated varints.
        assert!(RevisionRecord::decode(&[0, 0, 0x80], 0).is_err());
        assert!(RevisionRecord::decode(&[0, 1, b'a', 0, 0], 0).is_err());
        assert!(RevisionRecord::decode(
            &[0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0],
            0
        )
        .is_err());
    }

    #[test]
    fn kv_meta_roundtrip() {
        let meta = KvMeta {
            applied_index: 7,
            applied_term: 3,
            revision: -2,
            compact_revision: i64::MAX,
        };
        assert_eq!(decode_kv_meta(&encode_kv_meta(&meta)).unwrap(), meta);
        assert!(decode_kv_meta(&[0; 31]).is_err());
    }
}
