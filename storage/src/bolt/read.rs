//! Reading any bbolt file: its buckets, nested buckets and key/value pairs,
//! in bolt's order.
//!
//! Design. [`BoltReader`] reads pages on demand through [`ReadAt`] (a file,
//! or bytes in memory) and keeps nothing but the current meta. The file
//! may come from anyone, so nothing read from it is trusted: the meta must
//! carry bbolt's magic, version and checksum and describe pages that the
//! file holds; a page number must lie inside the database and the page
//! must say it is that page; every element's key and value must lie inside
//! its page. A walk visits each page at most once and descends at most
//! [`DEPTH_MAX`] levels, so a corrupt file whose pages point at each other
//! ends in an error, not in a loop. The reader never follows the freelist:
//! it reads only what the trees reach.

use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::io;

use super::layout::{
    le_u32, le_u64, Meta, PageHeader, BRANCH_ELEMENT_BYTES, BRANCH_PAGE, BUCKET_HEADER_BYTES,
    BUCKET_LEAF, FREELIST_PAGE, LEAF_ELEMENT_BYTES, LEAF_PAGE, MAGIC, META_BYTES, NO_FREELIST,
    PAGE_BYTES, PAGE_HEADER_BYTES,
};

/// Deepest tree the reader descends: bbolt's trees over any database that
/// fits a disk are a handful of levels deep; a deeper one is corrupt.
pub const DEPTH_MAX: usize = 64;

/// Page sizes the reader accepts (bbolt uses the OS page size, 4 KiB on
/// most systems, up to 64 KiB on some).
const PAGE_BYTES_MIN: u32 = 512;
const PAGE_BYTES_MAX: u32 = 1 << 16;

/// Something to read pages from.
pub trait ReadAt {
    /// Bytes it holds.
    fn len_bytes(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; an error if it holds fewer bytes.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for [u8] {
    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let source = usize::try_from(offset)
            .ok()
            .and_then(|start| self.get(start..start.checked_add(buf.len())?))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(source);
        Ok(())
    }
}

impl ReadAt for Vec<u8> {
    fn len_bytes(&self) -> io::Result<u64> {
        self.as_slice().len_bytes()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.as_slice().read_exact_at(buf, offset)
    }
}

impl ReadAt for File {
    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    #[cfg(unix)]
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }

    #[cfg(not(unix))]
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = self;
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(buf)
    }
}

/// Why a bolt file could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum BoltError {
    /// Reading failed.
    Io(io::Error),
    /// Neither meta page carries bbolt's magic: not a bolt file.
    NotBolt,
    /// The file is a bolt file, but broken.
    Corrupt(String),
}

impl fmt::Display for BoltError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::NotBolt => write!(f, "not a bolt database"),
            Self::Corrupt(why) => write!(f, "corrupt bolt database: {why}"),
        }
    }
}

impl std::error::Error for BoltError {}

fn corrupt(why: impl fmt::Display) -> BoltError {
    BoltError::Corrupt(why.to_string())
}

/// A visitor of a bucket's entries: key, and value (`None` for a nested
/// bucket); an error stops the walk.
pub type Visit<'a, E> = dyn FnMut(&[u8], Option<&[u8]>) -> Result<(), E> + 'a;

/// A visitor of leaf elements: key, value, element flags; false stops.
type RawVisit<'a, E> = dyn FnMut(&[u8], &[u8], u32) -> Result<bool, E> + 'a;

/// Where a bucket's entries are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bucket {
    /// A tree whose root is this page.
    Page(u64),
    /// An inline bucket: its one leaf page, as stored after its header.
    Inline(Vec<u8>),
}

/// A bolt file open for reading.
pub struct BoltReader<F> {
    file: F,
    meta: Meta,
}

impl<F: ReadAt> BoltReader<F> {
    /// Reads and checks the meta pages of `file` and keeps the current one
    /// (the valid one with the higher transaction ID, as bbolt).
    pub fn open(file: F) -> Result<Self, BoltError> {
        let len = file.len_bytes().map_err(BoltError::Io)?;
        let read_meta = |offset: u64| -> Result<Option<Result<Meta, String>>, BoltError> {
            let mut page = [0u8; PAGE_HEADER_BYTES + META_BYTES];
            if offset.saturating_add(page.len() as u64) > len {
                return Ok(None);
            }
            file.read_exact_at(&mut page, offset)
                .map_err(BoltError::Io)?;
            if le_u32(&page, PAGE_HEADER_BYTES) != Some(MAGIC) {
                return Ok(None);
            }
            Ok(Some(Meta::decode(&page).map_err(str::to_owned)))
        };
        let first = read_meta(0)?;
        // The second meta is one page further; the first names the page
        // size, and if it is unreadable the usual sizes are tried.
        let mut sizes = vec![PAGE_BYTES as u32, 8192, 16384, 65536];
        if let Some(Ok(meta)) = &first {
            sizes.insert(0, meta.page_bytes);
        }
        let mut second = None;
        for size in sizes {
            if (PAGE_BYTES_MIN..=PAGE_BYTES_MAX).contains(&size) {
                if let Some(meta) = read_meta(u64::from(size))? {
                    second = Some(meta);
                    break;
                }
            }
        }
        let mut candidates: Vec<Meta> = Vec::new();
        let mut why = None;
        for meta in [first.clone(), second.clone()].into_iter().flatten() {
            match meta.and_then(|m| check_meta(&m, len).map(|()| m)) {
                Ok(meta) => candidates.push(meta),
                Err(e) => why = Some(e),
            }
        }
        candidates.sort_by_key(|m| std::cmp::Reverse(m.txid));
        match (candidates.first(), why) {
            (Some(meta), _) => Ok(Self { meta: *meta, file }),
            (None, Some(why)) => Err(corrupt(why)),
            (None, None) => Err(BoltError::NotBolt),
        }
    }

    /// Bytes of the database (pages up to the high water mark), what bbolt
    /// reports as a transaction's size.
    pub fn size_bytes(&self) -> u64 {
        self.meta.pgid * u64::from(self.meta.page_bytes)
    }

    /// The file's page size.
    pub fn page_bytes(&self) -> u32 {
        self.meta.page_bytes
    }

    /// The root bucket, whose entries are the top-level buckets.
    pub fn root(&self) -> Bucket {
        Bucket::Page(self.meta.root)
    }

    /// The bucket `name` inside `parent`, if there is one.
    pub fn bucket(&self, parent: &Bucket, name: &[u8]) -> Result<Option<Bucket>, BoltError> {
        let mut found = None;
        self.walk::<BoltError>(parent, &mut |key, value, flags| {
            if key != name {
                return Ok(true);
            }
            if flags & BUCKET_LEAF != 0 {
                found = Some(bucket_from_header(value)?);
            }
            Ok(false)
        })?;
        Ok(found)
    }

    /// Visits every entry of `bucket` in key order: `(key, Some(value))`
    /// for a value, `(key, None)` for a nested bucket (bbolt's `ForEach`).
    pub fn for_each<E: From<BoltError>>(
        &self,
        bucket: &Bucket,
        visit: &mut Visit<'_, E>,
    ) -> Result<(), E> {
        self.walk(bucket, &mut |key, value, flags| {
            visit(key, (flags & BUCKET_LEAF == 0).then_some(value))?;
            Ok(true)
        })
    }

    /// bbolt's consistency check (`tx.Check`, which `etcdctl snapshot
    /// status` runs): every page of every tree, nested buckets included,
    /// is reached once, and, when the file has a freelist, each page below
    /// the high water mark is either reached or free.
    pub fn check(&self) -> Result<(), BoltError> {
        let mut reached = HashSet::from([0, 1]);
        let claim = |first: u64, pages: u64, reached: &mut HashSet<u64>| {
            for id in first..first + pages {
                if !reached.insert(id) {
                    return Err(corrupt(format!("page {id}: multiple references")));
                }
            }
            Ok(())
        };
        let mut free = HashSet::new();
        if self.meta.freelist != NO_FREELIST {
            let page = self.read_page(self.meta.freelist)?;
            let header = PageHeader::decode(&page).ok_or_else(|| corrupt("page cut short"))?;
            if header.flags & FREELIST_PAGE == 0 {
                return Err(corrupt(format!("page {} is not a freelist", header.id)));
            }
            claim(header.id, u64::from(header.overflow) + 1, &mut reached)?;
            let (mut count, mut at) = (u64::from(header.count), PAGE_HEADER_BYTES);
            if header.count == u16::MAX {
                count = le_u64(&page, at).ok_or_else(|| corrupt("freelist cut short"))?;
                at += 8;
            }
            for i in 0..count {
                let id = usize::try_from(i)
                    .ok()
                    .and_then(|i| le_u64(&page, at + 8 * i))
                    .ok_or_else(|| corrupt("freelist cut short"))?;
                if !free.insert(id) {
                    return Err(corrupt(format!("page {id}: already freed")));
                }
            }
        }
        let mut stack = vec![(self.meta.root, 0usize)];
        while let Some((pgid, depth)) = stack.pop() {
            if depth > DEPTH_MAX {
                return Err(corrupt(format!("tree deeper than {DEPTH_MAX} levels")));
            }
            let page = self.read_page(pgid)?;
            let header = PageHeader::decode(&page).ok_or_else(|| corrupt("page cut short"))?;
            claim(pgid, u64::from(header.overflow) + 1, &mut reached)?;
            if free.contains(&pgid) {
                return Err(corrupt(format!("page {pgid}: reachable freed")));
            }
            let count = usize::from(header.count);
            if header.flags & BRANCH_PAGE != 0 {
                for i in 0..count {
                    let element = PAGE_HEADER_BYTES + BRANCH_ELEMENT_BYTES * i;
                    let child = le_u64(&page, element + 8)
                        .ok_or_else(|| corrupt(format!("page {pgid}: elements overrun")))?;
                    stack.push((child, depth + 1));
                }
            } else if header.flags & LEAF_PAGE != 0 {
                let mut inline = Vec::new();
                for i in 0..count {
                    let element = PAGE_HEADER_BYTES + LEAF_ELEMENT_BYTES * i;
                    let flags = le_u32(&page, element)
                        .ok_or_else(|| corrupt(format!("page {pgid}: elements overrun")))?;
                    let (_, value) = element_bytes(&page, element, 4, 8)?;
                    if flags & BUCKET_LEAF != 0 {
                        match bucket_from_header(value)? {
                            Bucket::Page(root) => stack.push((root, 0)),
                            Bucket::Inline(page) => inline.push(Bucket::Inline(page)),
                        }
                    }
                }
                // Inline buckets take no page, but may nest trees.
                for bucket in inline {
                    self.walk::<BoltError>(&bucket, &mut |_, value, flags| {
                        if flags & BUCKET_LEAF != 0 {
                            if let Bucket::Page(root) = bucket_from_header(value)? {
                                stack.push((root, 0));
                            }
                        }
                        Ok(true)
                    })?;
                }
            } else {
                return Err(corrupt(format!(
                    "page {pgid}: invalid type {:#x}",
                    header.flags
                )));
            }
        }
        if self.meta.freelist != NO_FREELIST {
            for id in 0..self.meta.pgid {
                if !reached.contains(&id) && !free.contains(&id) {
                    return Err(corrupt(format!("page {id}: unreachable unfreed")));
                }
            }
        }
        Ok(())
    }

    /// Visits the leaf elements of `bucket` in order until `visit` says
    /// false (stop).
    fn walk<E: From<BoltError>>(
        &self,
        bucket: &Bucket,
        visit: &mut RawVisit<'_, E>,
    ) -> Result<(), E> {
        let mut visited = HashSet::new();
        match bucket {
            Bucket::Inline(page) => {
                let header = PageHeader::decode(page)
                    .ok_or_else(|| corrupt("inline bucket shorter than a page header"))?;
                if header.flags & LEAF_PAGE == 0 {
                    return Err(corrupt("inline bucket is not a leaf page").into());
                }
                self.walk_node(page, 0, &mut visited, visit).map(drop)
            }
            Bucket::Page(pgid) => self.walk_page(*pgid, 0, &mut visited, visit).map(drop),
        }
    }

    fn walk_page<E: From<BoltError>>(
        &self,
        pgid: u64,
        depth: usize,
        visited: &mut HashSet<u64>,
        visit: &mut RawVisit<'_, E>,
    ) -> Result<bool, E> {
        if depth > DEPTH_MAX {
            return Err(corrupt(format!("tree deeper than {DEPTH_MAX} levels")).into());
        }
        if !visited.insert(pgid) {
            return Err(corrupt(format!("page {pgid} is reached twice")).into());
        }
        let page = self.read_page(pgid)?;
        self.walk_node(&page, depth, visited, visit)
    }

    fn walk_node<E: From<BoltError>>(
        &self,
        page: &[u8],
        depth: usize,
        visited: &mut HashSet<u64>,
        visit: &mut RawVisit<'_, E>,
    ) -> Result<bool, E> {
        let header = PageHeader::decode(page).ok_or_else(|| corrupt("page cut short"))?;
        let count = usize::from(header.count);
        if header.flags & BRANCH_PAGE != 0 {
            for i in 0..count {
                let element = PAGE_HEADER_BYTES + BRANCH_ELEMENT_BYTES * i;
                let child = le_u64(page, element + 8)
                    .ok_or_else(|| corrupt(format!("page {}: elements overrun", header.id)))?;
                element_bytes(page, element, 0, 4)?;
                if !self.walk_page(child, depth + 1, visited, visit)? {
                    return Ok(false);
                }
            }
            Ok(true)
        } else if header.flags & LEAF_PAGE != 0 {
            for i in 0..count {
                let element = PAGE_HEADER_BYTES + LEAF_ELEMENT_BYTES * i;
                let flags = le_u32(page, element)
                    .ok_or_else(|| corrupt(format!("page {}: elements overrun", header.id)))?;
                let (key, value) = element_bytes(page, element, 4, 8)?;
                if !visit(key, value, flags)? {
                    return Ok(false);
                }
            }
            Ok(true)
        } else {
            Err(corrupt(format!(
                "page {} has flags {:#x}, not a branch or a leaf",
                header.id, header.flags
            ))
            .into())
        }
    }

    /// Page `pgid` and its overflow pages.
    fn read_page(&self, pgid: u64) -> Result<Vec<u8>, BoltError> {
        let page_bytes = u64::from(self.meta.page_bytes);
        // Pages 0 and 1 are the metas; none of a tree's pages can be.
        if pgid < 2 || pgid >= self.meta.pgid {
            return Err(corrupt(format!(
                "page {pgid} outside the database (pages 2..{})",
                self.meta.pgid
            )));
        }
        let mut head = [0u8; PAGE_HEADER_BYTES];
        self.file
            .read_exact_at(&mut head, pgid * page_bytes)
            .map_err(BoltError::Io)?;
        let header = PageHeader::decode(&head).ok_or_else(|| corrupt("page cut short"))?;
        if header.id != pgid {
            return Err(corrupt(format!(
                "page {pgid} says it is page {}",
                header.id
            )));
        }
        let pages = u64::from(header.overflow) + 1;
        if pgid + pages > self.meta.pgid {
            return Err(corrupt(format!(
                "page {pgid} overflows past the end of the database"
            )));
        }
        // Bounded by the file's size: check_meta saw the file hold every
        // page below the high water mark.
        let bytes = usize::try_from(pages * page_bytes)
            .map_err(|_| corrupt(format!("page {pgid} is too large")))?;
        let mut page = vec![0u8; bytes];
        self.file
            .read_exact_at(&mut page, pgid * page_bytes)
            .map_err(BoltError::Io)?;
        Ok(page)
    }
}

/// A meta that passed its checksum still has to describe this file.
fn check_meta(meta: &Meta, file_bytes: u64) -> Result<(), String> {
    let page_bytes = meta.page_bytes;
    if !(PAGE_BYTES_MIN..=PAGE_BYTES_MAX).contains(&page_bytes) || !page_bytes.is_power_of_two() {
        return Err(format!("page size {page_bytes}"));
    }
    let needed = meta
        .pgid
        .checked_mul(u64::from(page_bytes))
        .ok_or_else(|| format!("{} pages", meta.pgid))?;
    if needed > file_bytes {
        return Err(format!(
            "the meta counts {} pages of {page_bytes} bytes, the file holds {file_bytes} bytes",
            meta.pgid
        ));
    }
    if meta.root < 2 || meta.root >= meta.pgid {
        return Err(format!("root page {} outside the database", meta.root));
    }
    Ok(())
}

/// The key and value (for a leaf: `sizes_at` 8, two sizes) or the key
/// alone (a branch: one size, empty value) of the element at `element`.
fn element_bytes(
    page: &[u8],
    element: usize,
    pos_at: usize,
    sizes_at: usize,
) -> Result<(&[u8], &[u8]), BoltError> {
    let overrun = || corrupt("element outside its page");
    let field = |at: usize| {
        le_u32(page, element + at)
            .map(|v| v as usize)
            .ok_or_else(overrun)
    };
    let pos = field(pos_at)?;
    let key_len = field(sizes_at)?;
    let value_len = if sizes_at == 8 { field(12)? } else { 0 };
    let start = element.checked_add(pos).ok_or_else(overrun)?;
    let middle = start.checked_add(key_len).ok_or_else(overrun)?;
    let end = middle.checked_add(value_len).ok_or_else(overrun)?;
    if end > page.len() {
        return Err(overrun());
    }
    Ok((&page[start..middle], &page[middle..end]))
}

/// The bucket a nested bucket's header (and inline page) describes.
fn bucket_from_header(value: &[u8]) -> Result<Bucket, BoltError> {
    let root = le_u64(value, 0).ok_or_else(|| corrupt("bucket header cut short"))?;
    if root == 0 {
        let page = value
            .get(BUCKET_HEADER_BYTES..)
            .ok_or_else(|| corrupt("inline bucket header cut short"))?;
        Ok(Bucket::Inline(page.to_vec()))
    } else {
        Ok(Bucket::Page(root))
    }
}

#[cfg(test)]
mod tests {
    use super::super::write::{BoltWriter, VecSource};
    use super::*;

    fn sample() -> Vec<u8> {
        let entries = (0..600u32)
            .map(|i| (i.to_be_bytes().to_vec(), vec![7u8; (i % 90) as usize]))
            .collect();
        let small = vec![(b"a".to_vec(), b"1".to_vec())];
        let writer = BoltWriter::new(
            vec![
                (
                    b"many".to_vec(),
                    Box::new(VecSource::new(entries)) as Box<_>,
                ),
                (b"one".to_vec(), Box::new(VecSource::new(small)) as Box<_>),
            ],
            4096,
        )
        .unwrap();
        writer.flat_map(|c| c.unwrap()).collect()
    }

    /// Reads everything the file holds, as status and restore do.
    fn read_all(file: Vec<u8>) -> Result<usize, BoltError> {
        let reader = BoltReader::open(file)?;
        reader.check()?;
        let mut entries = 0;
        let mut names = Vec::new();
        reader.for_each::<BoltError>(&reader.root(), &mut |name, _| {
            names.push(name.to_vec());
            Ok(())
        })?;
        for name in names {
            if let Some(bucket) = reader.bucket(&reader.root(), &name)? {
                reader.for_each::<BoltError>(&bucket, &mut |_, _| {
                    entries += 1;
                    Ok(())
                })?;
            }
        }
        Ok(entries)
    }

    /// Any byte of the file changed, any cut: an error or a (wrong but
    /// bounded) answer, never a panic or a hang.
    #[test]
    fn damaged_files_never_panic() {
        let file = sample();
        assert_eq!(read_all(file.clone()).unwrap(), 601);
        let mut errors = 0;
        for at in (0..file.len()).step_by(7) {
            for value in [0x00, 0xff, 0x01] {
                let mut bad = file.clone();
                if bad[at] == value {
                    continue;
                }
                bad[at] = value;
                errors += usize::from(read_all(bad).is_err());
            }
        }
        assert!(errors > 100, "only {errors} damaged files refused");
        for cut in [
            0,
            10,
            4096,
            4096 + 80,
            8192,
            file.len() - 4096,
            file.len() - 1,
        ] {
            assert!(read_all(file[..cut].to_vec()).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn pages_pointing_at_each_other_end_in_an_error() {
        let mut file = sample();
        let reader = BoltReader::open(file.clone()).unwrap();
        let Some(Bucket::Page(root)) = reader.bucket(&reader.root(), b"many").unwrap() else {
            panic!("a tree")
        };
        // The branch root's first child becomes the root itself.
        let at = root as usize * PAGE_BYTES + PAGE_HEADER_BYTES + 8;
        file[at..at + 8].copy_from_slice(&root.to_le_bytes());
        let error = read_all(file).unwrap_err();
        assert!(error.to_string().contains("twice") || error.to_string().contains("multiple"));
    }

    #[test]
    fn the_valid_meta_with_the_higher_txid_wins() {
        let mut file = sample();
        let reader = BoltReader::open(file.clone()).unwrap();
        assert_eq!(reader.meta.txid, 1);
        // Break meta 1: meta 0 (txid 0) takes over.
        file[PAGE_BYTES + PAGE_HEADER_BYTES + 40] ^= 0xff;
        let reader = BoltReader::open(file.clone()).unwrap();
        assert_eq!(reader.meta.txid, 0);
        file[PAGE_HEADER_BYTES + 40] ^= 0xff;
        assert!(matches!(BoltReader::open(file), Err(BoltError::Corrupt(_))));
        assert!(matches!(
            BoltReader::open(vec![0u8; 3 * PAGE_BYTES]),
            Err(BoltError::NotBolt)
        ));
    }
}
