//! WAL segment files: naming, preallocation, and reading one back.
//!
//! Design. A segment is `<seq as 16 hex digits>.wal`, preallocated by
//! writing zeros over its whole length and syncing, so that later writes
//! overwrite allocated blocks in place and `fdatasync` has no size or
//! extent metadata to flush. A new segment is made under a temporary name
//! ([`SPARE_FILE`]), zero-filled and synced, given its header and synced
//! again, then renamed into place and the directory synced: a crash at any
//! step leaves either a spare (removed at open) or a complete segment with
//! a header.
//!
//! Reading a segment ([`read_segment`]) walks its frames until the first
//! one that does not decode. What follows decides what that is: zeros only
//! (or bytes that hold no valid frame) is the end of the log, possibly
//! with a torn last write; a valid frame after it is damage in the middle
//! of the log, never skipped.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::frame::{decode_frame, decode_items, FrameError, Item, FRAME_ALIGN};

/// Bytes of a segment file, preallocated (etcd's `SegmentSizeBytes`).
pub(crate) const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Name of the segment being prepared.
pub(crate) const SPARE_FILE: &str = "spare.tmp";
/// Zeros are written in chunks of this size.
const ZERO_CHUNK_BYTES: usize = 1024 * 1024;
const SUFFIX: &str = ".wal";

/// A segment's file name.
pub(crate) fn segment_name(seq: u64) -> String {
    format!("{seq:016x}{SUFFIX}")
}

/// The sequence number a file name stands for, if it is a segment's.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(SUFFIX)?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Creates (truncating) `path` and fills it with `bytes` zeros, synced.
pub(crate) fn create_zeroed(path: &Path, bytes: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let zeros = vec![0u8; ZERO_CHUNK_BYTES];
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(ZERO_CHUNK_BYTES as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_all()?;
    Ok(file)
}

/// Syncs a directory, so that names created, renamed or removed in it last.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What [`read_segment`] found.
#[derive(Debug)]
pub(crate) struct SegmentRead {
    /// Each valid frame's items, in order.
    pub(crate) frames: Vec<Vec<Item>>,
    /// Where the valid frames end: the next write goes here.
    pub(crate) end: u64,
    /// Where the first frame (the segment header) ends; 0 without one.
    pub(crate) header_end: u64,
    /// The file's length.
    pub(crate) len: u64,
    /// When the valid frames end on something other than zeros: the first
    /// bad offset, what is wrong there, and the end of the non-zero bytes
    /// (the stretch a recovery zeroes).
    pub(crate) torn: Option<Torn>,
}

/// A tail that is not zeros after the last valid frame.
#[derive(Debug)]
pub(crate) struct Torn {
    pub(crate) error: FrameError,
    pub(crate) nonzero_end: u64,
}

/// Why a segment cannot be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    Io(io::Error),
    /// Damage before valid data: the offset of the bad frame and why.
    Corrupt {
        offset: u64,
        detail: String,
    },
}

/// Reads every frame of the segment at `path`.
pub(crate) fn read_segment(path: &Path) -> Result<SegmentRead, ReadError> {
    let mut file = File::open(path).map_err(ReadError::Io)?;
    let len = file.metadata().map_err(ReadError::Io)?.len();
    // Sized up front: a segment is read whole, once, at open.
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(ReadError::Io)?;
    scan_segment(&bytes)
}

/// Every frame of a segment's bytes: what [`read_segment`] reads, with no
/// file (so that any bytes at all can be tried on it).
pub(crate) fn scan_segment(bytes: &[u8]) -> Result<SegmentRead, ReadError> {
    let mut frames = Vec::new();
    let mut at = 0usize;
    let mut header_end = 0;
    let error = loop {
        match decode_frame(&bytes[at..]) {
            Ok((payload, len)) => match decode_items(payload) {
                Ok(items) => {
                    frames.push(items);
                    at += len;
                    if header_end == 0 {
                        header_end = at as u64;
                    }
                }
                // The checksum held: the writer wrote this. Damage or a bug,
                // never a torn write.
                Err(e) => {
                    return Err(ReadError::Corrupt {
                        offset: at as u64,
                        detail: e.to_string(),
                    })
                }
            },
            Err(e) => break e,
        }
    };
    if let Some(later) = next_valid_frame(bytes, at + FRAME_ALIGN) {
        return Err(ReadError::Corrupt {
            offset: at as u64,
            detail: format!("{error}, yet a valid record follows at offset {later}"),
        });
    }
    let nonzero_end = last_nonzero(&bytes[at..]).map(|n| (at + n) as u64);
    Ok(SegmentRead {
        frames,
        end: at as u64,
        header_end,
        len: bytes.len() as u64,
        torn: nonzero_end.map(|nonzero_end| Torn { error, nonzero_end }),
    })
}

/// The first offset at or after `from` (rounded up to the alignment) where
/// a whole, valid frame starts.
fn next_valid_frame(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from.next_multiple_of(FRAME_ALIGN);
    while at < bytes.len() {
        // Skip zeros a chunk at a time (a slice comparison is a memcmp).
        let chunk = (bytes.len() - at).min(4096);
        if bytes[at..at + chunk] == ZEROS[..chunk] {
            at += chunk;
            continue;
        }
        if bytes[at..].len() >= 8 && bytes[at..at + 8] != [0; 8] {
            if let Ok((payload, _)) = decode_frame(&bytes[at..]) {
                if decode_items(payload).is_ok() {
                    return Some(at);
                }
            }
        }
        at += FRAME_ALIGN;
    }
    None
}

static ZEROS: [u8; 4096] = [0; 4096];

/// One past the last non-zero byte of `bytes`, if there is one.
fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    let mut end = bytes.len();
    while end > 0 {
        let start = end.saturating_sub(ZEROS.len());
        if bytes[start..end] != ZEROS[..end - start] {
            let at = bytes[start..end].iter().rposition(|&b| b != 0)?;
            return Some(start + at + 1);
        }
        end = start;
    }
    None
}

/// Segment files by sequence number, and the other names in the directory.
pub(crate) type Listing = (Vec<(u64, PathBuf)>, Vec<PathBuf>);

/// The segment files in `dir` by sequence number, and any other names
/// (the spare among them).
pub(crate) fn list(dir: &Path) -> io::Result<Listing> {
    let mut segments = Vec::new();
    let mut others = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        match name.to_str().and_then(parse_segment_name) {
            Some(seq) => segments.push((seq, entry.path())),
            None => others.push(entry.path()),
        }
    }
    segments.sort();
    Ok((segments, others))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_name(0x2a), "000000000000002a.wal");
        assert_eq!(parse_segment_name(&segment_name(0x2a)), Some(0x2a));
        assert_eq!(parse_segment_name("2a.wal"), None);
        assert_eq!(parse_segment_name(SPARE_FILE), None);
    }

    #[test]
    fn last_nonzero_byte() {
        let mut bytes = vec![0u8; 10_000];
        assert_eq!(last_nonzero(&bytes), None);
        bytes[4097] = 1;
        assert_eq!(last_nonzero(&bytes), Some(4098));
        bytes[9999] = 1;
        assert_eq!(last_nonzero(&bytes), Some(10_000));
    }
}
