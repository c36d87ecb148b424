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

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment mimalloc's plain calls guarantee for blocks of at least
/// this size (its `MI_MAX_ALIGN_SIZE`); a smaller block is aligned to a
/// power of two at least as large as the alignment its size allows.
const PLAIN_ALIGN: usize = 16;

/// Whether a block of this layout may come from the plain calls.
fn plain(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
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
