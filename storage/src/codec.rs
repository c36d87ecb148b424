//! Hand-written record encodings. Everything read back from disk is checked;
//! a record that does not decode is a [`StorageError`], never a panic.
//!
//! A stored version (its mod revision is the table key):
//!
//! ```text
//! flags: u8                bit 0 = tombstone; other bits must be 0
//! key length: varint       LEB128
//! key: bytes
//! create_revision: varint  zigzag LEB128 of the i64
//! version: varint
//! lease: varint
//! value: bytes             the rest of the record
//! ```

use oxetcd_core::storage::{KvMeta, LeaseRecord, StorageError};

const FLAG_TOMBSTONE: u8 = 1;

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

impl RevisionRecord<'_> {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 4 * 10 + self.key.len() + self.value.len());
        out.push(if self.tombstone { FLAG_TOMBSTONE } else { 0 });
        put_varint(&mut out, self.key.len() as u64);
        out.extend_from_slice(self.key);
        put_varint(&mut out, zigzag(self.create_revision));
        put_varint(&mut out, zigzag(self.version));
        put_varint(&mut out, zigzag(self.lease));
        out.extend_from_slice(self.value);
        out
    }
}

impl<'a> RevisionRecord<'a> {
    pub(crate) fn decode(bytes: &'a [u8]) -> Result<Self, StorageError> {
        let (&flags, mut rest) = bytes
            .split_first()
            .ok_or_else(|| StorageError::corrupt(VERSION_RECORD, "empty"))?;
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
            let bytes = record.encode();
            assert_eq!(RevisionRecord::decode(&bytes).unwrap(), record);
        }
        assert_eq!(
            RevisionRecord {
                key: b"k",
                create_revision: 5,
                version: 1,
                lease: 0,
                tombstone: false,
                value: b""
            }
            .encode()
            .len(),
            6
        );
    }

    #[test]
    fn corrupt_revision_records_are_errors() {
        assert!(RevisionRecord::decode(b"").is_err());
        // Unknown flag.
        assert!(RevisionRecord::decode(&[2, 0, 0, 0, 0]).is_err());
        // Key longer than the record.
        assert!(RevisionRecord::decode(&[0, 5, b'a', 0, 0, 0]).is_err());
        assert!(RevisionRecord::decode(&[
            0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ])
        .is_err());
        // Truncated varints.
        assert!(RevisionRecord::decode(&[0, 0, 0x80]).is_err());
        assert!(RevisionRecord::decode(&[0, 1, b'a', 0, 0]).is_err());
        assert!(RevisionRecord::decode(&[
            0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0
        ])
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
