//! bbolt's on-disk encodings: the page header, the meta, branch and leaf
//! elements, the bucket header. Everything is little-endian, as bbolt
//! writes it on every platform etcd runs on.
//!
//! This module only encodes and decodes fixed-size records; it never
//! follows a page number (that is [`super::read`]'s job, with its bounds).

/// Page size of the files oxetcd writes (bbolt's default on Linux).
pub const PAGE_BYTES: usize = 4096;

/// Bytes of a page header: page ID u64, flags u16, count u16, overflow u32.
pub const PAGE_HEADER_BYTES: usize = 16;
/// Bytes of a branch element: pos u32, key size u32, child page ID u64.
pub const BRANCH_ELEMENT_BYTES: usize = 16;
/// Bytes of a leaf element: flags u32, pos u32, key size u32, value size u32.
pub const LEAF_ELEMENT_BYTES: usize = 16;
/// Bytes of a bucket header: root page ID u64, sequence u64.
pub const BUCKET_HEADER_BYTES: usize = 16;

/// Page flags.
pub const BRANCH_PAGE: u16 = 0x01;
/// A leaf page.
pub const LEAF_PAGE: u16 = 0x02;
/// A meta page.
pub const META_PAGE: u16 = 0x04;
/// A freelist page.
pub const FREELIST_PAGE: u16 = 0x10;

/// Leaf element flag: the value is a nested bucket's header.
pub const BUCKET_LEAF: u32 = 0x01;

/// bbolt's magic and the only format version it reads.
pub const MAGIC: u32 = 0xED0C_DAED;
/// bbolt's data format version.
pub const VERSION: u32 = 2;

/// The freelist page ID of a file written without a freelist (etcd's
/// `NoFreelistSync`): readers rebuild it by walking the trees.
pub const NO_FREELIST: u64 = u64::MAX;

/// Bytes of the meta record (after the page header) that its checksum
/// covers: everything before the checksum itself.
const META_SUMMED_BYTES: usize = 56;
/// Bytes of the meta record.
pub const META_BYTES: usize = 64;

/// A page header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// The page's own ID.
    pub id: u64,
    /// Its type ([`BRANCH_PAGE`], [`LEAF_PAGE`], …).
    pub flags: u16,
    /// Number of elements.
    pub count: u16,
    /// Pages after this one that belong to it.
    pub overflow: u32,
}

impl PageHeader {
    /// Writes the header at the start of `page`.
    pub fn encode(&self, page: &mut [u8]) {
        page[0..8].copy_from_slice(&self.id.to_le_bytes());
        page[8..10].copy_from_slice(&self.flags.to_le_bytes());
        page[10..12].copy_from_slice(&self.count.to_le_bytes());
        page[12..16].copy_from_slice(&self.overflow.to_le_bytes());
    }

    /// Reads the header at the start of `page`, `None` if it is shorter.
    pub fn decode(page: &[u8]) -> Option<Self> {
        Some(Self {
            id: le_u64(page, 0)?,
            flags: u16::from_le_bytes(page.get(8..10)?.try_into().ok()?),
            count: u16::from_le_bytes(page.get(10..12)?.try_into().ok()?),
            overflow: le_u32(page, 12)?,
        })
    }
}

/// A meta record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Page size of the file.
    pub page_bytes: u32,
    /// Root page of the root bucket.
    pub root: u64,
    /// The root bucket's sequence.
    pub sequence: u64,
    /// Freelist page, or [`NO_FREELIST`].
    pub freelist: u64,
    /// High water mark: pages `0..pgid` make up the database.
    pub pgid: u64,
    /// Transaction that wrote this meta.
    pub txid: u64,
}

impl Meta {
    /// The whole meta page (header, record with its checksum, zeros) for
    /// page `id`.
    pub fn page(&self, id: u64) -> Vec<u8> {
        let mut page = vec![0u8; self.page_bytes as usize];
        PageHeader {
            id,
            flags: META_PAGE,
            count: 0,
            overflow: 0,
        }
        .encode(&mut page);
        let meta = &mut page[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + META_BYTES];
        meta[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        meta[4..8].copy_from_slice(&VERSION.to_le_bytes());
        meta[8..12].copy_from_slice(&self.page_bytes.to_le_bytes());
        // flags: unused by bbolt, zero.
        meta[16..24].copy_from_slice(&self.root.to_le_bytes());
        meta[24..32].copy_from_slice(&self.sequence.to_le_bytes());
        meta[32..40].copy_from_slice(&self.freelist.to_le_bytes());
        meta[40..48].copy_from_slice(&self.pgid.to_le_bytes());
        meta[48..56].copy_from_slice(&self.txid.to_le_bytes());
        let sum = fnv64a(&meta[..META_SUMMED_BYTES]);
        meta[56..64].copy_from_slice(&sum.to_le_bytes());
        page
    }

    /// Reads the meta record that follows a page header in `page`,
    /// checking the magic, the version and the checksum, as bbolt does
    /// (a zero checksum is accepted, as bbolt accepts it).
    pub fn decode(page: &[u8]) -> Result<Self, &'static str> {
        let meta = page
            .get(PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + META_BYTES)
            .ok_or("meta page cut short")?;
        let word = |at: usize| le_u64(meta, at).unwrap_or_default();
        if le_u32(meta, 0) != Some(MAGIC) {
            return Err("no bolt magic");
        }
        if le_u32(meta, 4) != Some(VERSION) {
            return Err("unsupported bolt version");
        }
        let sum = word(56);
        if sum != 0 && sum != fnv64a(&meta[..META_SUMMED_BYTES]) {
            return Err("meta checksum mismatch");
        }
        Ok(Self {
            page_bytes: le_u32(meta, 8).unwrap_or_default(),
            root: word(16),
            sequence: word(24),
            freelist: word(32),
            pgid: word(40),
            txid: word(48),
        })
    }
}

/// FNV-1a, 64 bits: bbolt's meta checksum.
pub fn fnv64a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The little-endian u32 at `at`, if `bytes` holds it.
pub fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let end = at.checked_add(4)?;
    Some(u32::from_le_bytes(bytes.get(at..end)?.try_into().ok()?))
}

/// The little-endian u64 at `at`, if `bytes` holds it.
pub fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let end = at.checked_add(8)?;
    Some(u64::from_le_bytes(bytes.get(at..end)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv64a_matches_the_reference_values() {
        assert_eq!(fnv64a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv64a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv64a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn meta_round_trips_and_a_flipped_bit_fails_the_checksum() {
        let meta = Meta {
            page_bytes: 4096,
            root: 7,
            sequence: 0,
            freelist: 2,
            pgid: 9,
            txid: 1,
        };
        let mut page = meta.page(1);
        assert_eq!(PageHeader::decode(&page).unwrap().flags, META_PAGE);
        assert_eq!(Meta::decode(&page), Ok(meta));
        page[PAGE_HEADER_BYTES + 40] ^= 1;
        assert_eq!(Meta::decode(&page), Err("meta checksum mismatch"));
        assert!(Meta::decode(&page[..40]).is_err());
    }
}
