//! The checksummed envelope of the backend's records other than versions:
//! its `meta` records (applied index, commit sequence, bytes in use,
//! membership with the cluster and storage versions, auth, alarms) and its
//! leases. A damaged record is refused as damaged, never served.
//!
//! ```text
//! tag: u8            0xA5
//! payload: bytes     the record as it was stored before checksums
//! checksum: u32 LE   CRC-32C of the table's name, a zero byte, the
//!                    record's key, the tag and the payload
//! ```
//!
//! The key is in the checksum, so a record read under another key than it
//! was written at (a flipped bit in a lease ID) fails it too.
//!
//! Design. Records written before checksums (the payload alone) still
//! read, unchecked, as versions with their old flags do (see `codec`).
//! The backend seals its old `meta` records at open (module `kv::meta`),
//! once each decodes, so they are read unchecked at most once.
//! What tells a sealed record from an old one must survive one flipped
//! bit, so that no single flip turns a checked record into an unchecked
//! one. How depends on the record's [`Shape`]:
//!
//! - A fixed-size payload (the applied index, a counter, a lease) is told
//!   by the record's length: sealed it is [`SEAL_BYTES`] longer. A bit
//!   flipped inside the record leaves its length and fails the tag or the
//!   checksum; a bit flipped in the offsets redb stores changes a length
//!   by a power of two, never by five, so it cannot make a sealed record
//!   old-sized.
//! - A protobuf payload (membership, auth, alarms) is told by its first
//!   byte. oxetcd's messages have fields 1 to 15 of wire types 0 and 2
//!   only, so an old record is empty or begins with a tag byte whose top
//!   bit is clear and whose low three bits are `000` or `010`; [`TAG`]
//!   has its top bit set and ends in `101`, three bits or more from any
//!   of them. A first byte within one bit of the tag is taken for a
//!   sealed record, and refused unless it is the tag and the checksum
//!   holds.
//!
//! The format version and contents records (module `format`) are not
//! sealed: both files carry them, an older build must read them to refuse
//! a file it does not know, and each is accepted only at one exact value,
//! so a flipped bit in either is refused at open already.

use std::fmt;

use oxetcd_core::storage::StorageError;

use crate::crc32c::Crc32c;

/// The first byte of every sealed record.
const TAG: u8 = 0xa5;
/// The checksum's bytes at the end of a sealed record.
const CHECKSUM_BYTES: usize = 4;
/// What sealing adds to a payload: the tag and the checksum. Not a power
/// of two (see the module note).
pub(crate) const SEAL_BYTES: usize = 1 + CHECKSUM_BYTES;

/// Where a record is stored: its table and key, which its checksum
/// covers and errors name.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Address<'a> {
    /// A record of the `meta` table, by name.
    Meta(&'a str),
    /// A lease of the `leases` table, by ID.
    Lease(i64),
}

/// What a record's payload looked like before checksums, which tells an
/// old record from a sealed one (see the module note).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Exactly this many bytes.
    Fixed(usize),
    /// A protobuf message of oxetcd's own schema: fields 1 to 15, of wire
    /// types 0 and 2 only.
    Message,
}

impl Address<'_> {
    fn checksum(&self, payload: &[u8]) -> u32 {
        let mut crc = Crc32c::default();
        match *self {
            Self::Meta(key) => {
                crc.update(b"meta\0");
                crc.update(key.as_bytes());
            }
            Self::Lease(id) => {
                crc.update(b"leases\0");
                crc.update(&id.to_le_bytes());
            }
        }
        crc.update(&[TAG]);
        crc.update(payload);
        crc.sum()
    }
}

impl fmt::Display for Address<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Meta(key) => write!(f, "meta record {key:?}"),
            Self::Lease(id) => write!(f, "lease record {id:x}"),
        }
    }
}

/// `payload` as stored at `address`: tagged and checksummed.
pub(crate) fn seal(address: Address<'_>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + SEAL_BYTES);
    out.push(TAG);
    out.extend_from_slice(payload);
    out.extend_from_slice(&address.checksum(payload).to_le_bytes());
    out
}

/// The payload of the record stored at `address`: checked when it is
/// sealed, as it is when it was written before checksums. Anything else
/// is refused as damaged.
pub(crate) fn unseal<'a>(
    address: Address<'_>,
    shape: Shape,
    stored: &'a [u8],
) -> Result<&'a [u8], StorageError> {
    let sealed = match shape {
        Shape::Fixed(len) if stored.len() == len => false,
        Shape::Fixed(len) if stored.len() == len + SEAL_BYTES => true,
        Shape::Fixed(len) => {
            return Err(StorageError::corrupt(
                address,
                format_args!(
                    "{} bytes, expected {len} or {} (the backend file is damaged)",
                    stored.len(),
                    len + SEAL_BYTES
                ),
            ))
        }
        Shape::Message => stored
            .first()
            .is_some_and(|&first| (first ^ TAG).count_ones() <= 1),
    };
    if !sealed {
        return Ok(stored);
    }
    let damaged = |detail: fmt::Arguments<'_>| {
        StorageError::corrupt(
            address,
            format_args!("{detail} (the backend file is damaged)"),
        )
    };
    let Some((&tag, rest)) = stored.split_first() else {
        return Err(damaged(format_args!("empty")));
    };
    if tag != TAG {
        return Err(damaged(format_args!("unknown tag {tag:#04x}")));
    }
    let split = rest
        .len()
        .checked_sub(CHECKSUM_BYTES)
        .ok_or_else(|| damaged(format_args!("too short for its checksum")))?;
    let (payload, word) = rest.split_at(split);
    let mut stored_sum = [0u8; CHECKSUM_BYTES];
    stored_sum.copy_from_slice(word);
    let stored_sum = u32::from_le_bytes(stored_sum);
    let computed = address.checksum(payload);
    if stored_sum != computed {
        return Err(damaged(format_args!(
            "checksum mismatch: stored {stored_sum:#010x}, computed {computed:#010x}"
        )));
    }
    Ok(payload)
}

/// Whether `stored` is a sealed record of `address` whose checksum holds.
#[cfg(test)]
pub(crate) fn is_sealed(address: Address<'_>, stored: &[u8]) -> bool {
    stored.first() == Some(&TAG)
        && stored.len() >= SEAL_BYTES
        && unseal(address, Shape::Fixed(stored.len() - SEAL_BYTES), stored).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KV_META: Address<'static> = Address::Meta("kv_meta");

    #[test]
    fn sealed_records_roundtrip() {
        for (address, shape, payload) in [
            (KV_META, Shape::Fixed(32), &[7u8; 32][..]),
            (Address::Lease(-3), Shape::Fixed(16), &[1; 16][..]),
            (Address::Meta("membership"), Shape::Message, &[0x0a, 0][..]),
            (Address::Meta("alarms"), Shape::Message, &[][..]),
        ] {
            let sealed = seal(address, payload);
            assert_eq!(sealed.len(), payload.len() + SEAL_BYTES);
            assert_eq!(unseal(address, shape, &sealed).unwrap(), payload);
            // Written before checksums: read as it is.
            assert_eq!(unseal(address, shape, payload).unwrap(), payload);
        }
    }

    /// A record read under another key than it was written at fails its
    /// checksum.
    #[test]
    fn the_key_is_checked() {
        let sealed = seal(Address::Lease(1), &[0; 16]);
        assert!(unseal(Address::Lease(2), Shape::Fixed(16), &sealed).is_err());
        let sealed = seal(Address::Meta("auth"), &[0x08, 1]);
        assert!(unseal(Address::Meta("alarms"), Shape::Message, &sealed).is_err());
    }

    /// One flipped bit anywhere in a sealed record is refused: it neither
    /// passes the checksum nor reads as a record written before checksums.
    #[test]
    fn one_flipped_bit_is_refused() {
        for (shape, payload) in [
            (Shape::Fixed(32), &[0x5a; 32][..]),
            (Shape::Fixed(8), &[0; 8][..]),
            (Shape::Message, &[0x0a, 3, b'a', b'b', b'c', 0x10, 1][..]),
            (Shape::Message, &[][..]),
        ] {
            let sealed = seal(KV_META, payload);
            for at in 0..sealed.len() * 8 {
                let mut damaged = sealed.clone();
                damaged[at / 8] ^= 1 << (at % 8);
                assert!(
                    unseal(KV_META, shape, &damaged).is_err(),
                    "{shape:?}: bit {at} passed"
                );
            }
        }
    }

    /// A length redb stores, changed by one flipped bit (by a power of
    /// two), never makes a sealed fixed-size record read as an old one.
    #[test]
    fn a_changed_length_is_refused() {
        for len in [8, 16, 32] {
            let sealed = seal(KV_META, &vec![0; len]);
            for bit in 0..8 {
                let delta = 1usize << bit;
                if let Some(shorter) = sealed.len().checked_sub(delta) {
                    let cut = &sealed[..shorter];
                    assert!(unseal(KV_META, Shape::Fixed(len), cut).is_err());
                }
                let mut longer = sealed.clone();
                longer.resize(sealed.len() + delta, 0);
                assert!(unseal(KV_META, Shape::Fixed(len), &longer).is_err());
            }
        }
    }

    /// Every first byte oxetcd's protobuf records can begin with (fields 1
    /// to 15, wire types 0 and 2) is three bits or more from the tag.
    #[test]
    fn old_message_records_are_far_from_the_tag() {
        for field in 1u8..=15 {
            for wire_type in [0u8, 2] {
                let first = (field << 3) | wire_type;
                assert!((first ^ TAG).count_ones() >= 3, "{first:#04x}");
                let old = [first, 0];
                assert_eq!(unseal(KV_META, Shape::Message, &old).unwrap(), &old[..]);
            }
        }
    }

    #[test]
    fn errors_name_the_record() {
        let mut sealed = seal(Address::Lease(0x7b), &[0; 16]);
        sealed[3] ^= 1;
        let error = unseal(Address::Lease(0x7b), Shape::Fixed(16), &sealed).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("lease record 7b"), "{text}");
        assert!(text.contains("damaged"), "{text}");
    }
}
