//! etcd's write-ahead log (`member/wal/*.wal`), read back: the metadata
//! (member and cluster IDs), the last hard state, the raft entries and the
//! snapshot marks, so that a data directory etcd wrote can be imported.
//!
//! Design. A WAL file is a sequence of frames: a little-endian u64 whose
//! low 56 bits are the record's length and whose top byte, when its high
//! bit is set, carries the number of padding bytes (0 to 7) that follow
//! the record to keep frames 8-byte aligned. A length of 0 is the end of
//! the file's written part (etcd preallocates files with zeros). A record
//! is `walpb.Record {type = 1, crc = 2, data = 3}`; every record but a crc
//! record carries the CRC-32C of all record data since the start of the
//! log (chained across files: each file starts with a crc record holding
//! the previous file's running sum). Types: 1 metadata
//! (`etcdserverpb.Metadata {NodeID = 1, ClusterID = 2}`), 2 a
//! `raftpb.Entry`, 3 a `raftpb.HardState`, 4 crc, 5 a snapshot mark
//! (`walpb.Snapshot {index = 1, term = 2}`).
//!
//! Decoding is pure ([`decode_file`], over a file's bytes) and checked:
//! lengths are bounded by etcd's own limit, every record's checksum is
//! verified, and nothing panics on a bad file. As in etcd, a record that
//! does not decode in the last file is a torn write (and the end of the
//! log) when it runs past the end of the file or one of its 512-byte
//! sectors is all zeros; anywhere else it is an error naming the file and
//! the offset. Entries logged again at an index already seen replace the
//! ones from there on, as raft's log truncation does.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use prost::Message;
use protobuf::Message as _;
use raft_proto::eraftpb::{Entry, HardState};

use crate::crc32c::Crc32c;

/// Record type of the member and cluster IDs.
pub const METADATA_TYPE: i64 = 1;
/// Record type of a raft entry.
pub const ENTRY_TYPE: i64 = 2;
/// Record type of a hard state.
pub const STATE_TYPE: i64 = 3;
/// Record type of the running checksum at a file's start.
pub const CRC_TYPE: i64 = 4;
/// Record type of a snapshot mark.
pub const SNAPSHOT_TYPE: i64 = 5;

/// Bytes of a frame's length word.
const LENGTH_BYTES: usize = 8;
/// etcd refuses records this large (`maxWALEntrySizeLimit`).
const MAX_RECORD_BYTES: u64 = 10 * 1024 * 1024;
/// The unit of a torn write.
const SECTOR_BYTES: u64 = 512;

#[derive(Clone, PartialEq, Message)]
struct RecordProto {
    #[prost(int64, tag = "1")]
    kind: i64,
    #[prost(uint32, tag = "2")]
    crc: u32,
    #[prost(bytes = "vec", tag = "3")]
    data: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct MetadataProto {
    #[prost(uint64, tag = "1")]
    node_id: u64,
    #[prost(uint64, tag = "2")]
    cluster_id: u64,
}

#[derive(Clone, PartialEq, Message)]
struct SnapshotMarkProto {
    #[prost(uint64, tag = "1")]
    index: u64,
    #[prost(uint64, tag = "2")]
    term: u64,
}

/// One record of a WAL file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its type (see the `*_TYPE` constants).
    pub kind: i64,
    /// The running checksum it carries.
    pub crc: u32,
    /// Its payload.
    pub data: Vec<u8>,
    /// Where its frame starts in the file.
    pub offset: u64,
}

/// The records of one file, and how the file ended.
#[derive(Debug, Default)]
pub struct FileRecords {
    /// The valid records, in order.
    pub records: Vec<Record>,
    /// Offset after the last valid record.
    pub end: u64,
    /// Whether a torn record follows the last valid one.
    pub torn: bool,
}

/// Why a WAL could not be read.
#[derive(Debug)]
pub enum WalError {
    /// A file or the directory could not be read.
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// A file holds something that is not a valid WAL where one must be.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Offset of the bad frame.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// The directory's files are not a WAL as etcd writes it.
    Layout {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
            Self::Corrupt {
                path,
                offset,
                detail,
            } => write!(
                f,
                "{}: corrupt etcd WAL at offset {offset}: {detail}",
                path.display()
            ),
            Self::Layout { path, detail } => write!(f, "{}: {detail}", path.display()),
        }
    }
}

impl std::error::Error for WalError {}

/// Decodes the frames of one file, checking checksums against `crc` (the
/// running checksum, carried from the previous file and updated here).
/// `last` says whether this is the log's last file, where a torn record
/// ends the log instead of being an error. Errors are `(offset, detail)`.
pub fn decode_file(bytes: &[u8], crc: &mut u32, last: bool) -> Result<FileRecords, (u64, String)> {
    let mut out = FileRecords::default();
    let mut at = 0usize;
    // Fewer than 8 bytes left is the end of the file.
    while let Some(word) = bytes.get(at..at + LENGTH_BYTES) {
        let mut buf = [0u8; LENGTH_BYTES];
        buf.copy_from_slice(word);
        let field = u64::from_le_bytes(buf);
        if field == 0 {
            break;
        }
        let record_bytes = field & !(0xffu64 << 56);
        let pad_bytes = if field >> 63 == 1 {
            (field >> 56) & 0x7
        } else {
            0
        };
        if record_bytes + pad_bytes >= MAX_RECORD_BYTES {
            return Err((
                at as u64,
                format!("a record of {record_bytes} bytes exceeds etcd's limit"),
            ));
        }
        let start = at + LENGTH_BYTES;
        let frame_end = start + (record_bytes + pad_bytes) as usize;
        let Some(frame) = bytes.get(start..frame_end) else {
            if last {
                out.torn = true;
                break;
            }
            return Err((at as u64, "a record runs past the end of the file".into()));
        };
        let data = &frame[..record_bytes as usize];
        let decoded = RecordProto::decode(data)
            .map_err(|e| format!("record does not decode: {e}"))
            .and_then(|record| {
                if record.kind == CRC_TYPE {
                    if *crc != 0 && record.crc != *crc {
                        return Err(format!(
                            "crc record holds {:08x}, the log's checksum is {:08x}",
                            record.crc, *crc
                        ));
                    }
                    let sum = record.crc;
                    return Ok((record, sum));
                }
                let mut running = Crc32c::resume(*crc);
                running.update(&record.data);
                let sum = running.sum();
                if record.crc != sum {
                    return Err(format!(
                        "record checksum {:08x}, expected {sum:08x}",
                        record.crc
                    ));
                }
                Ok((record, sum))
            });
        match decoded {
            Ok((record, sum)) => {
                *crc = sum;
                out.records.push(Record {
                    kind: record.kind,
                    crc: record.crc,
                    data: record.data,
                    offset: at as u64,
                });
                at = frame_end;
                out.end = at as u64;
            }
            Err(detail) => {
                if last && has_zero_sector(frame, start as u64) {
                    out.torn = true;
                    break;
                }
                return Err((at as u64, detail));
            }
        }
    }
    Ok(out)
}

/// Whether a 512-byte sector's share of `frame` (which starts at file
/// offset `offset`) is all zeros: a write that did not reach the disk.
fn has_zero_sector(frame: &[u8], offset: u64) -> bool {
    let mut at = 0usize;
    let mut file_at = offset;
    while at < frame.len() {
        let chunk = (SECTOR_BYTES - file_at % SECTOR_BYTES) as usize;
        let end = (at + chunk).min(frame.len());
        if frame[at..end].iter().all(|&b| b == 0) {
            return true;
        }
        file_at += (end - at) as u64;
        at = end;
    }
    false
}

/// The sequence and first index a WAL file's name stands for
/// (`%016x-%016x.wal`).
pub fn parse_wal_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".wal")?;
    let (seq, index) = stem.split_once('-')?;
    if seq.len() != 16 || index.len() != 16 {
        return None;
    }
    Some((
        u64::from_str_radix(seq, 16).ok()?,
        u64::from_str_radix(index, 16).ok()?,
    ))
}

/// Everything etcd's WAL records.
#[derive(Clone, Debug, Default)]
pub struct EtcdWal {
    /// This member's ID and its cluster's (the metadata record).
    pub member_id: u64,
    /// See [`Self::member_id`].
    pub cluster_id: u64,
    /// The last hard state recorded.
    pub hard_state: HardState,
    /// The entries, contiguous and in index order.
    pub entries: Vec<Entry>,
    /// The snapshot marks `(index, term)`, in order.
    pub snapshots: Vec<(u64, u64)>,
    /// Records read, of all files.
    pub records: u64,
    /// Whether the last file ended with a torn record.
    pub torn: bool,
}

impl EtcdWal {
    /// The entry at `index`, if the log holds it.
    pub fn entry(&self, index: u64) -> Option<&Entry> {
        let first = self.entries.first()?.index;
        let at = index.checked_sub(first)?;
        self.entries.get(usize::try_from(at).ok()?)
    }
}

/// Reads the WAL in `dir`: every `%016x-%016x.wal` file in sequence order.
pub fn read_dir(dir: &Path) -> Result<EtcdWal, WalError> {
    read_dir_after(dir, 0)
}

/// [`read_dir`], keeping only the entries after index `after` (those up
/// to a snapshot are not needed, and need not be held in memory).
pub fn read_dir_after(dir: &Path, after: u64) -> Result<EtcdWal, WalError> {
    let io = |path: &Path, error| WalError::Io {
        path: path.to_path_buf(),
        error,
    };
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let entry = entry.map_err(|e| io(dir, e))?;
        let name = entry.file_name();
        if let Some((seq, _)) = name.to_str().and_then(parse_wal_name) {
            files.push((seq, entry.path()));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(WalError::Layout {
            path: dir.to_path_buf(),
            detail: "no etcd WAL file (%016x-%016x.wal) in it".into(),
        });
    }
    for pair in files.windows(2) {
        if pair[1].0 != pair[0].0 + 1 {
            return Err(WalError::Layout {
                path: dir.to_path_buf(),
                detail: format!(
                    "WAL files out of sequence: {} follows {}",
                    pair[1].1.display(),
                    pair[0].1.display()
                ),
            });
        }
    }
    let mut wal = EtcdWal::default();
    let mut metadata: Option<Vec<u8>> = None;
    let mut crc = 0u32;
    let count = files.len();
    for (n, (_, path)) in files.iter().enumerate() {
        let bytes = fs::read(path).map_err(|e| io(path, e))?;
        let last = n + 1 == count;
        let decoded =
            decode_file(&bytes, &mut crc, last).map_err(|(offset, detail)| WalError::Corrupt {
                path: path.clone(),
                offset,
                detail,
            })?;
        wal.torn = decoded.torn;
        for record in decoded.records {
            wal.records += 1;
            let bad = |detail: String| WalError::Corrupt {
                path: path.clone(),
                offset: record.offset,
                detail,
            };
            match record.kind {
                METADATA_TYPE => {
                    if metadata.as_ref().is_some_and(|m| *m != record.data) {
                        return Err(bad("metadata conflicts with the earlier one".into()));
                    }
                    let decoded = MetadataProto::decode(record.data.as_slice())
                        .map_err(|e| bad(format!("metadata: {e}")))?;
                    wal.member_id = decoded.node_id;
                    wal.cluster_id = decoded.cluster_id;
                    metadata = Some(record.data);
                }
                ENTRY_TYPE => {
                    let entry = Entry::parse_from_bytes(&record.data)
                        .map_err(|e| bad(format!("entry: {e}")))?;
                    if entry.index > after {
                        push_entry(&mut wal.entries, entry);
                    }
                }
                STATE_TYPE => {
                    wal.hard_state = HardState::parse_from_bytes(&record.data)
                        .map_err(|e| bad(format!("hard state: {e}")))?;
                }
                CRC_TYPE => {}
                SNAPSHOT_TYPE => {
                    let mark = SnapshotMarkProto::decode(record.data.as_slice())
                        .map_err(|e| bad(format!("snapshot mark: {e}")))?;
                    wal.snapshots.push((mark.index, mark.term));
                }
                other => return Err(bad(format!("unknown record type {other}"))),
            }
        }
    }
    if metadata.is_none() {
        return Err(WalError::Layout {
            path: dir.to_path_buf(),
            detail: "the WAL has no metadata record".into(),
        });
    }
    Ok(wal)
}

/// Adds `entry` to the contiguous `entries`: one at an index already held
/// replaces it and everything after; one past a gap starts over.
fn push_entry(entries: &mut Vec<Entry>, entry: Entry) {
    let Some(first) = entries.first().map(|e| e.index) else {
        entries.push(entry);
        return;
    };
    let next = first + entries.len() as u64;
    if entry.index < first || entry.index > next {
        entries.clear();
    } else if entry.index < next {
        entries.truncate((entry.index - first) as usize);
    }
    entries.push(entry);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A frame as etcd's encoder writes it.
    pub(crate) fn frame(kind: i64, data: &[u8], crc: &mut u32) -> Vec<u8> {
        let record_crc = if kind == CRC_TYPE {
            *crc
        } else {
            let mut running = Crc32c::resume(*crc);
            running.update(data);
            *crc = running.sum();
            *crc
        };
        let record = RecordProto {
            kind,
            crc: record_crc,
            data: data.to_vec(),
        }
        .encode_to_vec();
        let pad = (8 - record.len() % 8) % 8;
        let mut field = record.len() as u64;
        if pad != 0 {
            field |= ((0x80 | pad) as u64) << 56;
        }
        let mut out = field.to_le_bytes().to_vec();
        out.extend_from_slice(&record);
        out.extend(std::iter::repeat_n(0u8, pad));
        out
    }

    fn entry(index: u64, term: u64) -> Vec<u8> {
        Entry {
            index,
            term,
            data: b"x".to_vec().into(),
            ..Default::default()
        }
        .write_to_bytes()
        .unwrap()
    }

    fn sample() -> Vec<u8> {
        let mut crc = 0;
        let mut bytes = frame(CRC_TYPE, b"", &mut crc);
        let meta = MetadataProto {
            node_id: 7,
            cluster_id: 9,
        }
        .encode_to_vec();
        bytes.extend(frame(METADATA_TYPE, &meta, &mut crc));
        bytes.extend(frame(ENTRY_TYPE, &entry(1, 1), &mut crc));
        bytes.extend(frame(ENTRY_TYPE, &entry(2, 1), &mut crc));
        bytes
    }

    #[test]
    fn frames_decode_with_chained_checksums() {
        let bytes = sample();
        let mut crc = 0;
        let read = decode_file(&bytes, &mut crc, true).unwrap();
        assert_eq!(read.records.len(), 4);
        assert_eq!(read.end, bytes.len() as u64);
        assert!(!read.torn);
        assert_eq!(read.records[1].kind, METADATA_TYPE);
        // Preallocated zeros after the records end the file.
        let mut padded = bytes.clone();
        padded.extend(vec![0u8; 4096]);
        let mut crc2 = 0;
        let again = decode_file(&padded, &mut crc2, false).unwrap();
        assert_eq!(again.records.len(), 4);
        assert_eq!(crc, crc2);
    }

    #[test]
    fn a_torn_tail_ends_the_log_and_a_bad_crc_elsewhere_is_an_error() {
        let bytes = sample();
        // Cut in the middle of the last record: torn in the last file.
        let cut = &bytes[..bytes.len() - 3];
        let read = decode_file(cut, &mut 0, true).unwrap();
        assert_eq!(read.records.len(), 3);
        assert!(read.torn);
        let (offset, detail) = decode_file(cut, &mut 0, false).unwrap_err();
        assert!(detail.contains("past the end"), "{detail}");
        assert_eq!(offset, read.end);
        // A flipped byte in the second entry's data: a checksum error,
        // even in the last file (no zero sector).
        let mut flipped = bytes.clone();
        let whole = decode_file(&bytes, &mut 0, true).unwrap();
        let last = whole.records[3].offset as usize + LENGTH_BYTES + 12;
        flipped[last] ^= 0x01;
        let (offset, detail) = decode_file(&flipped, &mut 0, true).unwrap_err();
        assert!(
            detail.contains("checksum") || detail.contains("decode"),
            "{detail}"
        );
        assert!(offset > 0);
        // Garbage never panics.
        for n in 0..bytes.len() {
            let mut junk = bytes.clone();
            junk[n] = junk[n].wrapping_add(0x5b);
            let _ = decode_file(&junk, &mut 0, true);
            let _ = decode_file(&junk[..n], &mut 0, false);
        }
        let huge = u64::MAX.to_le_bytes();
        assert!(decode_file(&huge, &mut 0, true).is_err());
    }

    #[test]
    fn later_entries_replace_earlier_ones_from_their_index() {
        let mut entries = Vec::new();
        for (index, term) in [(1, 1), (2, 1), (3, 1), (2, 2), (3, 2), (4, 2)] {
            push_entry(
                &mut entries,
                Entry {
                    index,
                    term,
                    ..Default::default()
                },
            );
        }
        let got: Vec<(u64, u64)> = entries.iter().map(|e| (e.index, e.term)).collect();
        assert_eq!(got, vec![(1, 1), (2, 2), (3, 2), (4, 2)]);
    }

    #[test]
    fn wal_names() {
        assert_eq!(
            parse_wal_name("0000000000000001-00000000000000a0.wal"),
            Some((1, 0xa0))
        );
        assert_eq!(parse_wal_name("0000000000000000.wal"), None);
        assert_eq!(parse_wal_name("0.tmp"), None);
    }
}
