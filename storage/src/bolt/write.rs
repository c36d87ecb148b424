//! Writing a fresh bbolt file, in file order, a chunk at a time.
//!
//! Design. A file is described by its top-level buckets, each an
//! [`EntrySource`]: a rewindable stream of (key, value) pairs in ascending
//! key order. [`BoltWriter`] reads every source twice. The first pass packs
//! the entries into leaf pages and keeps only each page's first key, count
//! and length; from those it plans the branch levels above the leaves and
//! gives every page its number, so the meta pages (which come first in
//! the file and name the root) can be written before any leaf. The second
//! pass packs the same entries the same way and writes the leaves; a
//! source that yields something else the second time is an error, never a
//! wrong file. Memory is one leaf page of entries plus the plan (a first
//! key per leaf), whatever the size of the file.
//!
//! Layout: meta pages 0 and 1 (identical but for the transaction ID),
//! an empty freelist page 2, then each non-inline bucket in name order
//! (its leaves, then its branch levels bottom-up), then the root bucket's
//! own tree. Every page is reachable or is the freelist, which is what
//! bbolt's consistency check (`tx.Check`, run by `etcdctl snapshot
//! status`) demands. A bucket whose entries fit one leaf page of at most a
//! quarter page is stored inline in its header, as bbolt stores it.
//!
//! Pages are filled up to the page size; a leaf takes at least one entry
//! and a branch at least two children (so each level is at most half the
//! one below and the tree always ends in one root), and an entry larger
//! than a page makes its page span several (bbolt's overflow).

use std::collections::VecDeque;
use std::io;
use std::ops::Range;

use super::layout::{
    Meta, PageHeader, BRANCH_ELEMENT_BYTES, BRANCH_PAGE, BUCKET_HEADER_BYTES, BUCKET_LEAF,
    FREELIST_PAGE, LEAF_ELEMENT_BYTES, LEAF_PAGE, PAGE_BYTES, PAGE_HEADER_BYTES,
};

/// bbolt's largest key; a longer one is refused (bbolt would refuse it too).
pub const KEY_BYTES_MAX: usize = 32_768;
/// bbolt's largest value.
pub const VALUE_BYTES_MAX: usize = (1 << 31) - 2;

/// A bucket whose single leaf page is at most this large is stored inline
/// (bbolt's rule: a quarter page).
const INLINE_BYTES_MAX: usize = PAGE_BYTES / 4;

/// The page numbers before the first bucket page: two metas, the freelist.
const FREELIST_PGID: u64 = 2;
const FIRST_DATA_PGID: u64 = 3;

/// One key/value pair.
pub type Entry = (Vec<u8>, Vec<u8>);

/// The entries of one bucket, in strictly ascending key order, readable
/// more than once.
pub trait EntrySource {
    /// Starts again from the first entry.
    fn rewind(&mut self) -> io::Result<()>;
    /// The next entry, `None` after the last.
    fn next_entry(&mut self) -> io::Result<Option<Entry>>;
}

/// An [`EntrySource`] over entries held in memory; sorts them.
#[derive(Clone, Debug, Default)]
pub struct VecSource {
    entries: Vec<Entry>,
    at: usize,
}

impl VecSource {
    /// A source of `entries`, in key order whatever their order here.
    pub fn new(mut entries: Vec<Entry>) -> Self {
        entries.sort();
        Self { entries, at: 0 }
    }
}

impl EntrySource for VecSource {
    fn rewind(&mut self) -> io::Result<()> {
        self.at = 0;
        Ok(())
    }

    fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        let entry = self.entries.get(self.at).cloned();
        self.at += usize::from(entry.is_some());
        Ok(entry)
    }
}

/// A bbolt file being written; an iterator of its bytes, in chunks of
/// about `chunk_bytes` (whole pages).
pub struct BoltWriter {
    buckets: Vec<BucketSlot>,
    chunk_bytes: usize,
    state: State,
    /// Pages in the file, once planned.
    pages: Option<u64>,
}

struct BucketSlot {
    name: Vec<u8>,
    source: Box<dyn EntrySource + Send>,
    plan: BucketPlan,
}

enum BucketPlan {
    Unplanned,
    /// The bucket's value in the root tree: header and inline page.
    Inline(Vec<u8>),
    Tree(Tree),
}

enum State {
    Unplanned,
    Emitting {
        segments: VecDeque<Segment>,
        /// Where the front segment is, when it is generated page by page.
        cursor: Cursor,
    },
    Failed,
}

/// A run of pages in file order.
enum Segment {
    Bytes(Vec<u8>),
    /// The leaves of bucket `.0`, packed again from its source.
    Leaves(usize),
    /// The branch levels of bucket `.0`'s tree.
    Branches(usize),
}

#[derive(Default)]
struct Cursor {
    packer: Packer,
    /// Next leaf (for `Leaves`) or next branch node in level order above
    /// the leaves (for `Branches`).
    index: usize,
    /// Level of the next branch node.
    level: usize,
}

/// A B+tree's pages: `levels[0]` are the leaves, the last level holds the
/// root alone.
struct Tree {
    levels: Vec<Vec<Node>>,
}

struct Node {
    first_key: Vec<u8>,
    /// Entries (leaf) or children (branch).
    count: usize,
    /// Pages the node takes.
    span: u64,
    pgid: u64,
    /// Children, as indexes into the level below (branches only).
    children: Range<usize>,
}

impl BoltWriter {
    /// A file with the given top-level buckets, yielded in chunks of about
    /// `chunk_bytes`. Names must be distinct and not empty.
    pub fn new(
        buckets: Vec<(Vec<u8>, Box<dyn EntrySource + Send>)>,
        chunk_bytes: usize,
    ) -> io::Result<Self> {
        let mut buckets: Vec<BucketSlot> = buckets
            .into_iter()
            .map(|(name, source)| BucketSlot {
                name,
                source,
                plan: BucketPlan::Unplanned,
            })
            .collect();
        buckets.sort_by(|a, b| a.name.cmp(&b.name));
        for (i, bucket) in buckets.iter().enumerate() {
            check_key(&bucket.name)?;
            if i > 0 && buckets[i - 1].name == bucket.name {
                return Err(invalid("two buckets with the same name"));
            }
        }
        Ok(Self {
            buckets,
            chunk_bytes: chunk_bytes.max(PAGE_BYTES),
            state: State::Unplanned,
            pages: None,
        })
    }

    /// Bytes of the whole file, known once the first chunk was asked for.
    pub fn file_bytes(&self) -> Option<u64> {
        self.pages.map(|p| p * PAGE_BYTES as u64)
    }

    /// Plans every page (the first pass) and queues the file's segments.
    fn plan(&mut self) -> io::Result<VecDeque<Segment>> {
        for bucket in &mut self.buckets {
            bucket.plan = plan_bucket(bucket.source.as_mut())?;
        }
        let mut next = FIRST_DATA_PGID;
        let mut segments = VecDeque::new();
        segments.push_back(Segment::Bytes(Vec::new())); // the head, below
        let mut root_entries = Vec::with_capacity(self.buckets.len());
        for (i, bucket) in self.buckets.iter_mut().enumerate() {
            let value = match &mut bucket.plan {
                BucketPlan::Inline(value) => value.clone(),
                BucketPlan::Tree(tree) => {
                    next = tree.assign(next);
                    segments.push_back(Segment::Leaves(i));
                    if tree.levels.len() > 1 {
                        segments.push_back(Segment::Branches(i));
                    }
                    let mut header = vec![0u8; BUCKET_HEADER_BYTES];
                    header[..8].copy_from_slice(&tree.root().pgid.to_le_bytes());
                    header
                }
                BucketPlan::Unplanned => unreachable!("every bucket was planned above"),
            };
            root_entries.push((bucket.name.clone(), value));
        }
        // The root bucket's tree, small (one entry per bucket), in memory.
        let mut root_source = VecSource::new(root_entries);
        let mut root_tree = match plan_tree(&mut root_source)? {
            Some(tree) => tree,
            None => Tree::empty_leaf(),
        };
        next = root_tree.assign(next);
        let mut root_pages = Vec::new();
        root_source.rewind()?;
        let mut packer = Packer::default();
        for leaf in &root_tree.levels[0] {
            let entries = packer.next_page(&mut root_source)?.unwrap_or_default();
            root_pages.extend_from_slice(&leaf_page(leaf.pgid, &entries, BUCKET_LEAF, true));
        }
        for level in 1..root_tree.levels.len() {
            for node in &root_tree.levels[level] {
                root_pages.extend_from_slice(&root_tree.branch_page(level, node));
            }
        }
        root_tree.levels.truncate(1);
        segments.push_back(Segment::Bytes(root_pages));

        let meta = Meta {
            page_bytes: PAGE_BYTES as u32,
            root: root_tree.root().pgid,
            sequence: 0,
            freelist: FREELIST_PGID,
            pgid: next,
            txid: 0,
        };
        let mut head = meta.page(0);
        head.extend_from_slice(&Meta { txid: 1, ..meta }.page(1));
        let mut freelist = vec![0u8; PAGE_BYTES];
        PageHeader {
            id: FREELIST_PGID,
            flags: FREELIST_PAGE,
            count: 0,
            overflow: 0,
        }
        .encode(&mut freelist);
        head.extend_from_slice(&freelist);
        segments[0] = Segment::Bytes(head);
        self.pages = Some(next);
        Ok(segments)
    }

    fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        if let State::Unplanned = self.state {
            let segments = self.plan()?;
            self.state = State::Emitting {
                segments,
                cursor: Cursor::default(),
            };
        }
        let State::Emitting { segments, cursor } = &mut self.state else {
            return Ok(None);
        };
        let mut chunk = Vec::with_capacity(self.chunk_bytes + PAGE_BYTES);
        while chunk.len() < self.chunk_bytes {
            let Some(segment) = segments.front_mut() else {
                break;
            };
            let finished = match segment {
                Segment::Bytes(bytes) => {
                    chunk.append(bytes);
                    true
                }
                Segment::Leaves(i) => {
                    let bucket = &mut self.buckets[*i];
                    let BucketPlan::Tree(tree) = &bucket.plan else {
                        unreachable!("only trees have leaf segments")
                    };
                    if cursor.index == 0 {
                        bucket.source.rewind()?;
                    }
                    let leaves = &tree.levels[0];
                    match (
                        leaves.get(cursor.index),
                        cursor.packer.next_page(bucket.source.as_mut())?,
                    ) {
                        (Some(leaf), Some(entries))
                            if entries.len() == leaf.count && entries[0].0 == leaf.first_key =>
                        {
                            chunk.extend_from_slice(&leaf_page(leaf.pgid, &entries, 0, true));
                            cursor.index += 1;
                            false
                        }
                        // The source ends where the plan does.
                        (None, None) => true,
                        _ => return Err(changed(&bucket.name)),
                    }
                }
                Segment::Branches(i) => {
                    let BucketPlan::Tree(tree) = &self.buckets[*i].plan else {
                        unreachable!("only trees have branch segments")
                    };
                    if cursor.level == 0 {
                        cursor.level = 1;
                        cursor.index = 0;
                    }
                    let node = &tree.levels[cursor.level][cursor.index];
                    chunk.extend_from_slice(&tree.branch_page(cursor.level, node));
                    cursor.index += 1;
                    if cursor.index == tree.levels[cursor.level].len() {
                        cursor.level += 1;
                        cursor.index = 0;
                    }
                    cursor.level == tree.levels.len()
                }
            };
            if finished {
                segments.pop_front();
                *cursor = Cursor::default();
            }
        }
        Ok((!chunk.is_empty()).then_some(chunk))
    }
}

impl Iterator for BoltWriter {
    type Item = io::Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        if let State::Failed = self.state {
            return None;
        }
        match self.next_chunk() {
            Ok(chunk) => chunk.map(Ok),
            Err(e) => {
                self.state = State::Failed;
                Some(Err(e))
            }
        }
    }
}

/// The first pass over one bucket: inline, or a planned tree.
fn plan_bucket(source: &mut dyn EntrySource) -> io::Result<BucketPlan> {
    source.rewind()?;
    let mut packer = Packer::default();
    let first = packer.next_page(source)?.unwrap_or_default();
    if page_bytes(&first) <= INLINE_BYTES_MAX && packer.next_page(source)?.is_none() {
        let mut value = vec![0u8; BUCKET_HEADER_BYTES];
        value.extend_from_slice(&leaf_page(0, &first, 0, false));
        return Ok(BucketPlan::Inline(value));
    }
    // Not inline: plan it again from the start, as a tree.
    Ok(match plan_tree(source)? {
        Some(tree) => BucketPlan::Tree(tree),
        None => BucketPlan::Inline(vec![0u8; BUCKET_HEADER_BYTES]),
    })
}

/// Packs `source` into leaves (first keys, counts and spans only) and
/// plans the branch levels above them; `None` if it is empty.
fn plan_tree(source: &mut dyn EntrySource) -> io::Result<Option<Tree>> {
    source.rewind()?;
    let mut packer = Packer::default();
    let mut leaves = Vec::new();
    while let Some(entries) = packer.next_page(source)? {
        leaves.push(Node {
            first_key: entries[0].0.clone(),
            count: entries.len(),
            span: span(page_bytes(&entries)),
            pgid: 0,
            children: 0..0,
        });
    }
    if leaves.is_empty() {
        return Ok(None);
    }
    let mut levels = vec![leaves];
    while let Some(below) = levels.last().filter(|level| level.len() > 1) {
        let mut level = Vec::new();
        let mut start = 0;
        let mut used = PAGE_HEADER_BYTES;
        for (i, child) in below.iter().enumerate() {
            let size = BRANCH_ELEMENT_BYTES + child.first_key.len();
            if i - start >= 2 && used + size > PAGE_BYTES {
                level.push(Node::branch(below, start..i, used));
                start = i;
                used = PAGE_HEADER_BYTES;
            }
            used += size;
        }
        level.push(Node::branch(below, start..below.len(), used));
        levels.push(level);
    }
    Ok(Some(Tree { levels }))
}

impl Node {
    fn branch(below: &[Node], children: Range<usize>, used: usize) -> Self {
        Self {
            first_key: below[children.start].first_key.clone(),
            count: children.len(),
            span: span(used),
            pgid: 0,
            children,
        }
    }
}

impl Tree {
    /// One empty leaf: the root tree of a file without buckets.
    fn empty_leaf() -> Self {
        Self {
            levels: vec![vec![Node {
                first_key: Vec::new(),
                count: 0,
                span: 1,
                pgid: 0,
                children: 0..0,
            }]],
        }
    }

    /// Numbers the pages from `next` in level order; the next free page.
    fn assign(&mut self, mut next: u64) -> u64 {
        for level in &mut self.levels {
            for node in level {
                node.pgid = next;
                next += node.span;
            }
        }
        next
    }

    fn root(&self) -> &Node {
        let top = self.levels.last().expect("a tree has at least its leaves");
        &top[0]
    }

    /// The page of branch `node` at `level` (>= 1).
    fn branch_page(&self, level: usize, node: &Node) -> Vec<u8> {
        let children = &self.levels[level - 1][node.children.clone()];
        let mut page = vec![0u8; node.span as usize * PAGE_BYTES];
        PageHeader {
            id: node.pgid,
            flags: BRANCH_PAGE,
            count: children.len() as u16,
            overflow: (node.span - 1) as u32,
        }
        .encode(&mut page);
        let mut data = PAGE_HEADER_BYTES + BRANCH_ELEMENT_BYTES * children.len();
        for (i, child) in children.iter().enumerate() {
            let element = PAGE_HEADER_BYTES + BRANCH_ELEMENT_BYTES * i;
            let key = &child.first_key;
            page[element..element + 4].copy_from_slice(&((data - element) as u32).to_le_bytes());
            page[element + 4..element + 8].copy_from_slice(&(key.len() as u32).to_le_bytes());
            page[element + 8..element + 16].copy_from_slice(&child.pgid.to_le_bytes());
            page[data..data + key.len()].copy_from_slice(key);
            data += key.len();
        }
        page
    }
}

/// Cuts a source into leaf pages: as many entries as fit a page, at least
/// one. It checks the order and sizes bbolt requires.
#[derive(Default)]
struct Packer {
    pending: Option<Entry>,
    last_key: Option<Vec<u8>>,
}

impl Packer {
    fn next_page(&mut self, source: &mut dyn EntrySource) -> io::Result<Option<Vec<Entry>>> {
        let mut entries = Vec::new();
        let mut used = PAGE_HEADER_BYTES;
        loop {
            let entry = match self.pending.take() {
                Some(entry) => entry,
                None => match source.next_entry()? {
                    Some(entry) => {
                        check_key(&entry.0)?;
                        if entry.1.len() > VALUE_BYTES_MAX {
                            return Err(invalid("a value larger than bbolt allows"));
                        }
                        if self.last_key.as_ref().is_some_and(|last| *last >= entry.0) {
                            return Err(invalid("keys out of order"));
                        }
                        self.last_key = Some(entry.0.clone());
                        entry
                    }
                    None => break,
                },
            };
            let size = LEAF_ELEMENT_BYTES + entry.0.len() + entry.1.len();
            if !entries.is_empty() && used + size > PAGE_BYTES {
                self.pending = Some(entry);
                break;
            }
            used += size;
            entries.push(entry);
        }
        Ok((!entries.is_empty()).then_some(entries))
    }
}

/// Bytes a leaf page holding `entries` needs.
fn page_bytes(entries: &[Entry]) -> usize {
    PAGE_HEADER_BYTES
        + entries
            .iter()
            .map(|(k, v)| LEAF_ELEMENT_BYTES + k.len() + v.len())
            .sum::<usize>()
}

/// Pages needed for `bytes`.
fn span(bytes: usize) -> u64 {
    bytes.div_ceil(PAGE_BYTES).max(1) as u64
}

/// A leaf page with `entries`, every element flagged `flags`; padded to
/// whole pages unless it is an inline bucket's page.
fn leaf_page(id: u64, entries: &[Entry], flags: u32, padded: bool) -> Vec<u8> {
    let used = page_bytes(entries);
    let pages = span(used);
    let mut page = vec![
        0u8;
        if padded {
            pages as usize * PAGE_BYTES
        } else {
            used
        }
    ];
    PageHeader {
        id,
        flags: LEAF_PAGE,
        count: entries.len() as u16,
        overflow: if padded { (pages - 1) as u32 } else { 0 },
    }
    .encode(&mut page);
    let mut data = PAGE_HEADER_BYTES + LEAF_ELEMENT_BYTES * entries.len();
    for (i, (key, value)) in entries.iter().enumerate() {
        let element = PAGE_HEADER_BYTES + LEAF_ELEMENT_BYTES * i;
        page[element..element + 4].copy_from_slice(&flags.to_le_bytes());
        page[element + 4..element + 8].copy_from_slice(&((data - element) as u32).to_le_bytes());
        page[element + 8..element + 12].copy_from_slice(&(key.len() as u32).to_le_bytes());
        page[element + 12..element + 16].copy_from_slice(&(value.len() as u32).to_le_bytes());
        page[data..data + key.len()].copy_from_slice(key);
        data += key.len();
        page[data..data + value.len()].copy_from_slice(value);
        data += value.len();
    }
    page
}

fn check_key(key: &[u8]) -> io::Result<()> {
    if key.is_empty() {
        Err(invalid("an empty key"))
    } else if key.len() > KEY_BYTES_MAX {
        Err(invalid("a key larger than bbolt allows"))
    } else {
        Ok(())
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("bolt writer: {what}"))
}

fn changed(bucket: &[u8]) -> io::Error {
    io::Error::other(format!(
        "bolt writer: bucket {:?} yielded other entries on its second pass",
        String::from_utf8_lossy(bucket)
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use quickcheck::{QuickCheck, TestResult};

    use super::super::layout::{le_u64, PageHeader};
    use super::super::read::{BoltError, BoltReader, Bucket};
    use super::*;

    type Buckets = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>;

    fn write(buckets: &Buckets, chunk_bytes: usize) -> Vec<u8> {
        let sources = buckets
            .iter()
            .map(|(name, entries)| {
                let entries = entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (name.clone(), Box::new(VecSource::new(entries)) as Box<_>)
            })
            .collect();
        let mut writer = BoltWriter::new(sources, chunk_bytes).unwrap();
        let mut file = Vec::new();
        for chunk in &mut writer {
            let chunk = chunk.unwrap();
            assert_eq!(chunk.len() % PAGE_BYTES, 0, "chunks are whole pages");
            file.extend_from_slice(&chunk);
        }
        assert_eq!(writer.file_bytes(), Some(file.len() as u64));
        file
    }

    fn read(file: Vec<u8>) -> Buckets {
        let reader = BoltReader::open(file).unwrap();
        reader.check().unwrap();
        let mut names = Vec::new();
        reader
            .for_each::<BoltError>(&reader.root(), &mut |name, value| {
                assert!(value.is_none(), "only buckets at the top");
                names.push(name.to_vec());
                Ok(())
            })
            .unwrap();
        let mut out = Buckets::new();
        for name in names {
            let bucket = reader.bucket(&reader.root(), &name).unwrap().unwrap();
            let mut entries = BTreeMap::new();
            let mut last: Option<Vec<u8>> = None;
            reader
                .for_each::<BoltError>(&bucket, &mut |k, v| {
                    assert!(last.as_deref() < Some(k), "keys in order");
                    last = Some(k.to_vec());
                    entries.insert(k.to_vec(), v.unwrap().to_vec());
                    Ok(())
                })
                .unwrap();
            out.insert(name, entries);
        }
        out
    }

    /// A small deterministic generator, so the large test needs no seed
    /// handling of its own.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
    }

    /// 100k keys make a three-level tree; some values span several pages;
    /// small and empty buckets go inline.
    #[test]
    fn many_keys_round_trip_through_branch_levels_and_overflow() {
        let mut rng = Lcg(7);
        let mut big = BTreeMap::new();
        for i in 0..100_000u64 {
            let value_len = match rng.next() % 1000 {
                0 => 4096 + (rng.next() % 20_000) as usize,
                n => (n % 64) as usize,
            };
            let key = format!("{:016x}/{i}", rng.next()).into_bytes();
            big.insert(key, vec![(i % 251) as u8; value_len]);
        }
        let mut buckets = Buckets::new();
        buckets.insert(b"big".to_vec(), big);
        buckets.insert(b"empty".to_vec(), BTreeMap::new());
        buckets.insert(
            b"small".to_vec(),
            BTreeMap::from([(b"k".to_vec(), b"v".to_vec())]),
        );
        let file = write(&buckets, 1 << 20);

        // The big bucket is a tree of several levels; the others inline.
        let reader = BoltReader::open(file.clone()).unwrap();
        let Some(Bucket::Page(root)) = reader.bucket(&reader.root(), b"big").unwrap() else {
            panic!("the big bucket is a tree");
        };
        let root_page = &file[root as usize * PAGE_BYTES..];
        let header = PageHeader::decode(root_page).unwrap();
        assert_eq!(header.flags, BRANCH_PAGE);
        let child = le_u64(root_page, PAGE_HEADER_BYTES + 8).unwrap();
        let child_header = PageHeader::decode(&file[child as usize * PAGE_BYTES..]).unwrap();
        assert_eq!(child_header.flags, BRANCH_PAGE, "at least three levels");
        for name in [&b"empty"[..], b"small"] {
            assert!(matches!(
                reader.bucket(&reader.root(), name).unwrap(),
                Some(Bucket::Inline(_))
            ));
        }
        assert_eq!(read(file), buckets);
    }

    #[test]
    fn a_file_without_buckets_is_valid() {
        let file = write(&Buckets::new(), 1);
        assert_eq!(file.len(), 4 * PAGE_BYTES);
        assert!(read(file).is_empty());
    }

    #[test]
    fn long_keys_still_make_a_tree_with_one_root() {
        let mut entries = BTreeMap::new();
        for i in 0..50u8 {
            entries.insert(vec![i; 6000], vec![i]);
        }
        let buckets = Buckets::from([(b"long".to_vec(), entries)]);
        assert_eq!(read(write(&buckets, 4096)), buckets);
    }

    #[test]
    fn sources_out_of_order_or_changing_are_refused() {
        /// Yields "b", then "a".
        struct Unsorted(u8);
        impl EntrySource for Unsorted {
            fn rewind(&mut self) -> io::Result<()> {
                self.0 = b'c';
                Ok(())
            }
            fn next_entry(&mut self) -> io::Result<Option<Entry>> {
                self.0 -= 1;
                Ok(Some((vec![self.0], Vec::new())))
            }
        }
        let mut writer = BoltWriter::new(
            vec![(b"x".to_vec(), Box::new(Unsorted(b'c')) as Box<_>)],
            4096,
        )
        .unwrap();
        let error = writer.next().unwrap().unwrap_err();
        assert!(error.to_string().contains("out of order"), "{error}");
        assert!(writer.next().is_none(), "a failed writer ends");

        /// Yields one more entry on every pass.
        struct Growing(usize, usize);
        impl EntrySource for Growing {
            fn rewind(&mut self) -> io::Result<()> {
                self.0 += 1;
                self.1 = 0;
                Ok(())
            }
            fn next_entry(&mut self) -> io::Result<Option<Entry>> {
                self.1 += 1;
                Ok(
                    (self.1 <= self.0 * 300)
                        .then(|| (format!("{:08}", self.1).into(), vec![0; 40])),
                )
            }
        }
        let mut writer = BoltWriter::new(
            vec![(b"x".to_vec(), Box::new(Growing(0, 0)) as Box<_>)],
            4096,
        )
        .unwrap();
        let error = writer.try_for_each(|c| c.map(drop)).unwrap_err();
        assert!(error.to_string().contains("second pass"), "{error}");
    }

    #[test]
    fn random_buckets_round_trip() {
        type Generated = Vec<(Vec<u8>, Vec<Entry>)>;
        fn property(buckets: Generated, big: u16) -> TestResult {
            let mut model = Buckets::new();
            for (name, entries) in buckets.into_iter().take(6) {
                if name.is_empty() {
                    continue;
                }
                let mut map: BTreeMap<_, _> =
                    entries.into_iter().filter(|(k, _)| !k.is_empty()).collect();
                // Some buckets large enough for branch pages.
                for i in 0..u32::from(big % 700) {
                    map.insert(i.to_be_bytes().to_vec(), name.clone());
                }
                model.insert(name, map);
            }
            TestResult::from_bool(read(write(&model, 8192)) == model)
        }
        QuickCheck::new()
            .tests(40)
            .quickcheck(property as fn(Generated, u16) -> TestResult);
    }
}
