//! [`WalLog`]: the raft log and hard state as a segmented, preallocated,
//! append-only write-ahead log.
//!
//! Design. Every change is one frame (see [`super::frame`]) written with
//! one positioned write and made durable with one `fdatasync` before the
//! call returns; the segment was zero-filled when made, so that sync has no
//! metadata to flush. The in-memory [`Image`] answers every read. One lock
//! orders the writers (only the log writer thread writes at run time) and
//! is held across the sync; the image has a lock of its own, taken only to
//! read or to apply a written change, so readers never wait for the disk.
//! When the current segment is half full, a thread zero-fills the next one
//! beside it; when a frame does not fit, that spare gets its header and
//! becomes the next segment. Compacting writes a mark, then removes the
//! oldest segments whose entries all lie below the new first index.
//!
//! A failed write or sync poisons the store: every later write fails with
//! the same error (an fsync is never retried). A full disk poisons it
//! only where bytes of the log may have been lost: a next segment that
//! cannot be made for want of space (its file is removed, the log is as
//! it was) and an append refused to keep space for the backend (see
//! [`super::space`]) fail with [`StorageError::DiskFull`] and may be
//! retried; a full disk met writing or syncing the log itself is final,
//! reported as [`StorageError::Io`].

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use oxetcd_core::storage::{LogState, LogStore, StorageError};
use raft_proto::eraftpb::{Entry, HardState};
use tracing::{info, warn};

use super::frame::{encode_frame, Item, ItemRef};
use super::image::Image;
use super::segment::{
    self, create_zeroed, read_segment, segment_name, sync_dir, ReadError, SEGMENT_BYTES, SPARE_FILE,
};
use super::space;
use crate::error::{io_error, OpenError};

/// Settings of a WAL; the defaults are what a member runs with.
#[derive(Clone, Copy, Debug)]
pub struct WalOptions {
    /// Size each segment is preallocated to.
    pub segment_bytes: u64,
    /// Appends of entries are refused as a full disk while the file
    /// system has less than this free (0: never).
    pub reserve_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            segment_bytes: SEGMENT_BYTES,
            reserve_bytes: space::RESERVE_BYTES,
        }
    }
}

/// The raft log in a directory of WAL segments. Cloning shares the log.
#[derive(Clone, Debug)]
pub struct WalLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    image: Mutex<Image>,
    writer: Mutex<Writer>,
    /// Held (an advisory lock on the directory) while the log is open.
    _lock: File,
}

/// A retained segment.
#[derive(Debug)]
struct Segment {
    seq: u64,
    path: PathBuf,
    /// The largest entry index written in it (0 for none): it may go once
    /// the log's first index is past this.
    max_index: u64,
}

#[derive(Debug)]
struct Writer {
    options: WalOptions,
    /// Oldest first; the last is being written.
    segments: VecDeque<Segment>,
    file: File,
    /// Where the next frame goes.
    offset: u64,
    /// Where the current segment's header ends.
    header_end: u64,
    /// The current segment file's length.
    capacity: u64,
    /// The next segment, being zero-filled.
    spare: Option<JoinHandle<io::Result<File>>>,
    buf: Vec<u8>,
    poisoned: Option<StorageError>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Let the spare finish, so that no thread writes in the directory
        // once the log is closed.
        if let Some(spare) = self.spare.take() {
            let _ = spare.join();
        }
    }
}

impl WalLog {
    /// Opens the WAL in `dir`, creating it (and the directory) if missing,
    /// with the default options.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        Self::open_with(dir, WalOptions::default())
    }

    /// Opens the WAL in `dir` with `options`.
    pub fn open_with(dir: &Path, options: WalOptions) -> Result<Self, OpenError> {
        Self::open_or_create(dir, options, Image::default())
    }

    /// Opens the WAL in `dir`; a directory with no segment gets one that
    /// starts from `initial`.
    pub(crate) fn open_or_create(
        dir: &Path,
        options: WalOptions,
        initial: Image,
    ) -> Result<Self, OpenError> {
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(|e| OpenError::from_io(dir, e))?;
            // The new directory's name, and its parent's (`member/` is
            // usually made just before), must last as the log does.
            for ancestor in dir.ancestors().skip(1).take(2) {
                if ancestor.as_os_str().is_empty() {
                    break;
                }
                sync_dir(ancestor).map_err(|e| OpenError::from_io(ancestor, e))?;
            }
        }
        let lock = File::open(dir).map_err(|e| OpenError::from_io(dir, e))?;
        lock.try_lock().map_err(|e| match e {
            fs::TryLockError::WouldBlock => OpenError::AlreadyOpen {
                path: dir.to_path_buf(),
            },
            fs::TryLockError::Error(e) => OpenError::from_io(dir, e),
        })?;
        let (image, writer) = recover(dir, options, initial)?;
        Ok(Self {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                image: Mutex::new(image),
                writer: Mutex::new(writer),
                _lock: lock,
            }),
        })
    }

    /// The WAL's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Number of segment files retained.
    pub fn segment_count(&self) -> usize {
        self.inner.writer().map(|w| w.segments.len()).unwrap_or(0)
    }

    /// Writes `items` as one frame, then applies them to the image.
    fn write(&self, writer: &mut Writer, items: &[ItemRef<'_>]) -> Result<(), StorageError> {
        writer.buf.clear();
        encode_frame(items, &mut writer.buf).map_err(StorageError::invariant)?;
        let written = writer.write_frame(&self.inner);
        let applied = written.and_then(|()| {
            let mut image = self.inner.image()?;
            for item in items {
                let owned = match item {
                    ItemRef::Header(_) => continue,
                    ItemRef::Entry(e) => Item::Entry((*e).clone()),
                    ItemRef::HardState(h) => Item::HardState((*h).clone()),
                    ItemRef::Mark {
                        first_index,
                        snapshot_term,
                        replace,
                    } => Item::Mark {
                        first_index: *first_index,
                        snapshot_term: *snapshot_term,
                        replace: *replace,
                    },
                    ItemRef::ClusterId(id) => Item::ClusterId(*id),
                };
                image.apply(owned).map_err(StorageError::invariant)?;
            }
            Ok(())
        });
        // A full disk here changed nothing (see the module note); what
        // write_frame found final it has poisoned already.
        if let Err(e) = &applied {
            if !matches!(e, StorageError::DiskFull { .. }) {
                writer.poisoned = Some(e.clone());
            }
        }
        applied
    }

    /// Removes the oldest segments whose entries all lie below the first
    /// index (never the one being written).
    fn release(&self, writer: &mut Writer) -> Result<(), StorageError> {
        let first = self.inner.image()?.first_index;
        let mut removed = 0;
        while writer.segments.len() > 1 && writer.segments[0].max_index < first {
            let Some(oldest) = writer.segments.pop_front() else {
                break;
            };
            fs::remove_file(&oldest.path).map_err(|e| {
                io_error(format!("removing WAL segment {}", oldest.path.display()), e)
            })?;
            removed += 1;
        }
        if removed > 0 {
            sync_dir(&self.inner.dir).map_err(|e| {
                io_error(
                    format!("syncing WAL directory {}", self.inner.dir.display()),
                    e,
                )
            })?;
        }
        Ok(())
    }
}

impl Inner {
    fn image(&self) -> Result<MutexGuard<'_, Image>, StorageError> {
        self.image.lock().map_err(|_| StorageError::IndexPoisoned)
    }

    fn writer(&self) -> Result<MutexGuard<'_, Writer>, StorageError> {
        let writer = self
            .writer
            .lock()
            .map_err(|_| StorageError::IndexPoisoned)?;
        match &writer.poisoned {
            Some(e) => Err(e.clone()),
            None => Ok(writer),
        }
    }
}

impl Writer {
    /// Writes `self.buf` (one frame) at the end of the log and syncs it,
    /// moving to a new segment first when it does not fit.
    fn write_frame(&mut self, inner: &Inner) -> Result<(), StorageError> {
        let len = self.buf.len() as u64;
        if self.offset + len > self.capacity && self.offset > self.header_end {
            let header = inner.image()?.header(self.current_seq() + 1);
            // A segment not made for want of space changed nothing: the
            // write may be retried.
            self.rotate(&inner.dir, &header).inspect_err(|e| {
                if !matches!(e, StorageError::DiskFull { .. }) {
                    self.poisoned = Some(e.clone());
                }
            })?;
        }
        let path = &self.current_path();
        let result = self
            .file
            .write_all_at(&self.buf, self.offset)
            .and_then(|()| {
                if self.offset + len > self.capacity {
                    // Past the preallocated end: the size changes too.
                    self.file.sync_all()
                } else {
                    self.file.sync_data()
                }
            });
        if let Err(e) = result {
            let e = final_io(format!("WAL write to {}", path.display()), e);
            self.poisoned = Some(e.clone());
            return Err(e);
        }
        self.offset += len;
        self.capacity = self.capacity.max(self.offset);
        if self.spare.is_none() && self.offset > self.capacity / 2 {
            self.start_spare(&inner.dir);
        }
        Ok(())
    }

    fn current_seq(&self) -> u64 {
        self.segments.back().map_or(0, |s| s.seq)
    }

    fn current_path(&self) -> PathBuf {
        self.segments
            .back()
            .map(|s| s.path.clone())
            .unwrap_or_default()
    }

    fn start_spare(&mut self, dir: &Path) {
        let path = dir.join(SPARE_FILE);
        let bytes = self.options.segment_bytes;
        let spawned = std::thread::Builder::new()
            .name("oxetcd-wal-spare".into())
            .spawn(move || {
                // A spare cut short by a full disk gives its space back.
                create_zeroed(&path, bytes).inspect_err(|_| {
                    let _ = fs::remove_file(&path);
                })
            });
        match spawned {
            Ok(handle) => self.spare = Some(handle),
            // The rotation makes the segment itself, in line.
            Err(e) => warn!(error = %e, "cannot start the WAL preallocation thread"),
        }
    }

    /// Makes segment `header.seq` from the spare and writes into it from now on.
    fn rotate(
        &mut self,
        dir: &Path,
        header: &super::frame::SegmentHeader,
    ) -> Result<(), StorageError> {
        let spare = match self.spare.take().map(JoinHandle::join) {
            Some(Ok(Ok(file))) => Some(file),
            Some(Ok(Err(e))) => {
                warn!(error = %e, "preallocating the next WAL segment failed; retrying");
                None
            }
            Some(Err(_)) | None => None,
        };
        let (file, header_end, capacity) = install_segment(dir, header, spare, self.options)?;
        self.segments.push_back(Segment {
            seq: header.seq,
            path: dir.join(segment_name(header.seq)),
            max_index: 0,
        });
        self.file = file;
        self.offset = header_end;
        self.header_end = header_end;
        self.capacity = capacity;
        Ok(())
    }
}

/// Makes segment `header.seq` in `dir`: zero-fills the spare (unless it
/// comes zero-filled), writes the header and syncs it, renames the spare
/// into place and syncs the directory. Returns the file, where its header
/// ends, and its length.
fn install_segment(
    dir: &Path,
    header: &super::frame::SegmentHeader,
    spare: Option<File>,
    options: WalOptions,
) -> Result<(File, u64, u64), StorageError> {
    let spare_path = dir.join(SPARE_FILE);
    let path = dir.join(segment_name(header.seq));
    let during = |what: &str| format!("{what} WAL segment {}", path.display());
    // Until the rename, the spare is no part of the log: on failure it is
    // removed, its space given back, and the log is as it was.
    let prepared = prepare_spare(&spare_path, header, spare, options, &during);
    let (file, header_end, capacity) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            let _ = fs::remove_file(&spare_path);
            return Err(e);
        }
    };
    fs::rename(&spare_path, &path)
        .and_then(|()| sync_dir(dir))
        .map_err(|e| final_io(during("naming"), e))?;
    Ok((file, header_end, capacity))
}

/// The spare, zero-filled, with the segment's header written and synced:
/// the file, where its header ends, and its length.
fn prepare_spare(
    spare_path: &Path,
    header: &super::frame::SegmentHeader,
    spare: Option<File>,
    options: WalOptions,
    during: &dyn Fn(&str) -> String,
) -> Result<(File, u64, u64), StorageError> {
    let file = match spare {
        Some(file) => file,
        None => create_zeroed(spare_path, options.segment_bytes)
            .map_err(|e| io_error(during("preallocating"), e))?,
    };
    let mut buf = Vec::new();
    encode_frame(&[ItemRef::Header(header)], &mut buf).map_err(StorageError::invariant)?;
    file.write_all_at(&buf, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| io_error(during("writing the header of"), e))?;
    let capacity = file
        .metadata()
        .map_err(|e| io_error(during("reading the size of"), e))?
        .len();
    Ok((file, buf.len() as u64, capacity))
}

/// An I/O error after which the log cannot be trusted to hold what was
/// written: final, even when it says the disk is full.
fn final_io(during: String, error: io::Error) -> StorageError {
    StorageError::Io {
        during,
        source: oxetcd_core::storage::Cause::new(error),
    }
}

/// Replays the segments in `dir` into an image, repairing a torn tail, and
/// readies the writer. A directory without segments gets a first one
/// holding `initial`.
fn recover(dir: &Path, options: WalOptions, initial: Image) -> Result<(Image, Writer), OpenError> {
    let corrupt = |path: &Path, detail: String| OpenError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let storage = |e: StorageError| OpenError::Io {
        path: dir.to_path_buf(),
        error: io::Error::other(e.to_string()),
    };
    let (mut segments, others) = segment::list(dir).map_err(|e| OpenError::from_io(dir, e))?;
    for other in others {
        if other.file_name().is_some_and(|n| n == SPARE_FILE) {
            // A spare never holds anything written to the log.
            fs::remove_file(&other).map_err(|e| OpenError::from_io(&other, e))?;
        }
    }
    // Compaction removes the oldest segments first; a crash between two
    // removals can leave an older one behind a gap. What follows the gap
    // starts with a full header; the completeness check below refuses the
    // log if an entry it needs was only before the gap.
    if let Some(gap) = segments.windows(2).rposition(|w| w[1].0 != w[0].0 + 1) {
        for (_, stale) in segments.drain(..=gap) {
            warn!(segment = %stale.display(), "removing a WAL segment left behind by a compaction");
            fs::remove_file(&stale).map_err(|e| OpenError::from_io(&stale, e))?;
        }
    }
    let mut image: Option<Image> = None;
    let mut retained = VecDeque::new();
    let mut tail = None;
    let count = segments.len();
    for (i, (seq, path)) in segments.into_iter().enumerate() {
        let last = i + 1 == count;
        let read = read_segment(&path).map_err(|e| match e {
            ReadError::Io(e) => OpenError::from_io(&path, e),
            ReadError::Corrupt { offset, detail } => corrupt(
                &path,
                format!("bad WAL record at offset {offset}: {detail}"),
            ),
        })?;
        if let Some(torn) = &read.torn {
            if !last {
                return Err(corrupt(
                    &path,
                    format!(
                        "bad WAL record at offset {} in a segment that is not the last: {}",
                        read.end, torn.error
                    ),
                ));
            }
        }
        let mut frames = read.frames.into_iter();
        match frames.next().and_then(|items| items.into_iter().next()) {
            Some(Item::Header(header)) if header.seq == seq => {
                let image = image.get_or_insert_with(|| Image::from_header(&header));
                image
                    .apply(Item::Header(header))
                    .map_err(|d| corrupt(&path, format!("at offset 0: {d}")))?;
            }
            None if last => {
                // Renamed into place before its header was durable can't
                // happen; a header torn some other way holds nothing
                // written to the log either.
                warn!(segment = %path.display(), "removing a WAL segment without a header");
                fs::remove_file(&path)
                    .and_then(|()| segment::sync_dir(dir))
                    .map_err(|e| OpenError::from_io(&path, e))?;
                continue;
            }
            _ => {
                return Err(corrupt(
                    &path,
                    format!("no header for segment {seq} at offset 0"),
                ))
            }
        }
        let image = image
            .as_mut()
            .ok_or_else(|| corrupt(&path, "no segment header".into()))?;
        let mut max_index = 0;
        for items in frames {
            for item in items {
                if let Item::Entry(e) = &item {
                    max_index = max_index.max(e.index);
                }
                image
                    .apply(item)
                    .map_err(|d| corrupt(&path, format!("before offset {}: {d}", read.end)))?;
            }
        }
        retained.push_back(Segment {
            seq,
            path: path.clone(),
            max_index,
        });
        tail = Some((path, read.end, read.header_end, read.len, read.torn));
    }
    let Some((path, end, header_end, len, torn)) = tail else {
        // A new log.
        let header = initial.header(0);
        let (file, header_end, capacity) =
            install_segment(dir, &header, None, options).map_err(storage)?;
        retained.push_back(Segment {
            seq: 0,
            path: dir.join(segment_name(0)),
            max_index: 0,
        });
        info!(dir = %dir.display(), "created a new WAL");
        return Ok((
            initial,
            Writer {
                options,
                segments: retained,
                file,
                offset: header_end,
                header_end,
                capacity,
                spare: None,
                buf: Vec::new(),
                poisoned: None,
            },
        ));
    };
    let image = image.unwrap_or(initial);
    image.check_complete().map_err(|d| corrupt(dir, d))?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| OpenError::from_io(&path, e))?;
    if let Some(torn) = torn {
        warn!(
            segment = %path.display(),
            offset = end,
            error = %torn.error,
            "the WAL ends in a torn write; zeroing it"
        );
        let zeros = vec![0u8; (torn.nonzero_end - end) as usize];
        file.write_all_at(&zeros, end)
            .and_then(|()| file.sync_data())
            .map_err(|e| OpenError::from_io(&path, e))?;
    }
    Ok((
        image,
        Writer {
            options,
            segments: retained,
            file,
            offset: end,
            header_end,
            capacity: len,
            spare: None,
            buf: Vec::new(),
            poisoned: None,
        },
    ))
}

impl LogStore for WalLog {
    fn state(&self) -> Result<LogState, StorageError> {
        Ok(self.inner.image()?.state())
    }

    fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
        self.inner.image()?.entries(low, high)
    }

    fn append(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> Result<(), StorageError> {
        if entries.is_empty() && hard_state.is_none() {
            return Ok(());
        }
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return Err(StorageError::AppendNotContiguous {
                    index: pair[1].index,
                    after: pair[0].index,
                });
            }
        }
        let mut writer = self.inner.writer()?;
        if let Some(first) = entries.first() {
            self.inner.image()?.check_append(first.index)?;
            let needed = entries
                .iter()
                .map(|e| (e.data.len() + e.context.len() + 32) as u64)
                .sum();
            space::check(&self.inner.dir, writer.options.reserve_bytes, needed)?;
        }
        let mut items: Vec<ItemRef<'_>> = entries.iter().map(ItemRef::Entry).collect();
        items.extend(hard_state.map(ItemRef::HardState));
        self.write(&mut writer, &items)?;
        if let (Some(last), Some(current)) = (entries.last(), writer.segments.back_mut()) {
            current.max_index = current.max_index.max(last.index);
        }
        Ok(())
    }

    fn compact(&self, index: u64) -> Result<(), StorageError> {
        let mut writer = self.inner.writer()?;
        let snapshot_term = {
            let image = self.inner.image()?;
            if index <= image.first_index {
                return Ok(());
            }
            // The last dropped entry's term; compacting past the end keeps
            // the recorded one (install_snapshot set it).
            image.term(index - 1).unwrap_or(image.snapshot_term)
        };
        let mark = ItemRef::Mark {
            first_index: index,
            snapshot_term,
            replace: false,
        };
        self.write(&mut writer, &[mark])?;
        self.release(&mut writer)
    }

    fn install_snapshot(&self, index: u64, term: u64) -> Result<(), StorageError> {
        let mut writer = self.inner.writer()?;
        let mark = ItemRef::Mark {
            first_index: index + 1,
            snapshot_term: term,
            replace: true,
        };
        self.write(&mut writer, &[mark])?;
        self.release(&mut writer)
    }

    fn store_cluster_id(&self, cluster_id: u64) -> Result<(), StorageError> {
        let mut writer = self.inner.writer()?;
        self.write(&mut writer, &[ItemRef::ClusterId(cluster_id)])
    }
}
