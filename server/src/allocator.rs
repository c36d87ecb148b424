//! The servers' global allocator: mimalloc, entered by its plain calls.
//!
//! Design. The `mimalloc` crate's allocator hands every request to
//! mimalloc's aligned calls. Those serve a small block from the size's free
//! list only when the list's next block happens to have the alignment and
//! the block is at most 1 KiB; anything else (a larger buffer, an empty
//! free list) takes the aligned slow path, which allocates `size +
//! alignment - 1` bytes and aligns inside them. Under 64 clients' puts that
//! path took 7 of the 45 allocations a put makes and 4.6 % of the server's
//! instructions (callgrind). mimalloc's plain calls already return blocks
//! aligned to 16 bytes, or to the block's size below that, which is every
//! alignment Rust asks for but a few: those are sent to the plain calls,
//! the rest (a task cell aligned to a cache line) to the aligned ones.
//!
//! [`tune`] shortens how long mimalloc keeps freed memory before giving it
//! back to the system (its purge delay) from its default of a second to
//! [`PURGE_DELAY_MS`]: a burst (a watch fan-out, a load of keys) frees and
//! allocates much within a second, and a second's freed pages were a sixth
//! of the peak resident set (one member's 256-watcher fan-out after 60,000
//! puts: 75-77 MiB at a second, 65-66 MiB at 100 ms, 61-62 MiB with no
//! delay, which cost 15 % more CPU per put; 100 ms costs none measurable).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_int, c_long, c_void};

use libmimalloc_sys as mi;

/// The alignment mimalloc's plain calls guarantee for blocks of at least
/// this size (its `MI_MAX_ALIGN_SIZE`); a smaller block is aligned to a
/// power of two at least as large as the alignment its size allows.
const PLAIN_ALIGN: usize = 16;

/// Whether a block of this layout may come from the plain calls.
fn plain(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// How long mimalloc keeps freed memory before it gives it back, in
/// milliseconds (see the module docs).
pub const PURGE_DELAY_MS: c_long = 100;

/// `mi_option_purge_delay`: its place in mimalloc 3's `mi_option_e`
/// (`mimalloc.h`), which the bindings do not name.
const OPTION_PURGE_DELAY: c_int = 15;

/// The environment variable mimalloc reads the purge delay from.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

extern "C" {
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`], unless the
/// environment chose one (`MIMALLOC_PURGE_DELAY`). Called first in a
/// server's `main`.
pub fn tune() {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        // SAFETY: a plain FFI call; mimalloc reads its options atomically.
        unsafe { mi_option_set(OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

/// mimalloc's purge delay now, in milliseconds.
pub fn purge_delay_ms() -> c_long {
    // SAFETY: a plain FFI call.
    unsafe { mi_option_get(OPTION_PURGE_DELAY) }
}

/// mimalloc, as [`GlobalAlloc`] (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct Allocator;

// SAFETY: every block comes from mimalloc with at least the layout's size
// and alignment (the plain calls only where they guarantee that alignment,
// see `plain`), and every block is given back to mimalloc, which frees or
// resizes a block whichever call made it.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; mimalloc returns null when out of memory.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller gives back a block this allocator returned.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` is a block this allocator returned for `layout`;
        // the new block keeps its alignment by the same rule as `alloc`.
        unsafe {
            if plain(new_size, layout.align()) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option set is mimalloc's purge delay: before, it holds the
    /// purge delay's default (a second; no other option of mimalloc 3
    /// defaults to it), after, the delay chosen.
    #[test]
    fn tune_sets_the_purge_delay() {
        if std::env::var_os(PURGE_DELAY_ENV).is_some() {
            let before = purge_delay_ms();
            tune();
            assert_eq!(purge_delay_ms(), before, "the environment's choice is kept");
            return;
        }
        assert_eq!(purge_delay_ms(), 1000, "mimalloc's default purge delay");
        tune();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }

    /// Blocks of every size and alignment mix come back aligned, hold
    /// their bytes through a resize across both kinds of call, and free.
    #[test]
    fn blocks_are_aligned_and_keep_their_bytes() {
        let allocator = Allocator;
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [1, 7, 8, 15, 16, 17, 100, 1024, 1025, 5000, 70_000] {
                let layout = Layout::from_size_align(size, align).expect("a valid layout");
                // SAFETY: the layout's size is not zero; each block is
                // used within its size and freed once, with its layout.
                unsafe {
                    let p = allocator.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xa5, size);
                    let grown = size * 3;
                    let q = allocator.realloc(p, layout, grown);
                    assert!(!q.is_null());
                    assert_eq!(q as usize % align, 0, "grown {grown} align {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xa5));
                    let shrunk = size.div_ceil(2);
                    let grown_layout = Layout::from_size_align(grown, align).expect("valid");
                    let r = allocator.realloc(q, grown_layout, shrunk);
                    assert_eq!(r as usize % align, 0, "shrunk {shrunk} align {align}");
                    assert!((0..shrunk).all(|i| *r.add(i) == 0xa5));
                    allocator.dealloc(r, Layout::from_size_align(shrunk, align).expect("valid"));

                    let z = allocator.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    allocator.dealloc(z, layout);
                }
            }
        }
    }
}
