//! The classifiers' allocator: a bump arena inside the memory a module
//! starts with, then the system allocator.
//!
//! Rust's wasm allocator (dlmalloc) takes every byte it hands out from
//! `memory.grow`, so each instance grew its linear memory on its first
//! allocation. The host's pooled memory slot then had to shrink back at the
//! next instantiation, and taking write access away from pages is an
//! `mprotect` that flushes the TLB of every core: on a two-core VM about a
//! fifth of what a fresh instance cost (issue 18). A classifier allocates a
//! few KiB per call, so it is served here from a zero-initialized static
//! (`.bss`, part of the initial memory, so never grown into) and memory does
//! not grow at all. What does not fit (a large input, a hostile one) goes to
//! the system allocator as before.
//!
//! Freeing gives bytes back only when they are the last allocation, which is
//! how a call's temporaries mostly go; the arena is per instance and a fresh
//! instance starts with it empty (the host zeroes the slot, POL-3).
//!
//! A guest is single-threaded (wasm32 without threads), so the bump pointer
//! is a plain `Cell`.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::{Cell, UnsafeCell};
use std::alloc::System;

/// Bytes of the arena: room for a classifier call on a few KiB of input.
const ARENA_BYTES: usize = 128 << 10;

/// The arena's bytes, aligned for any allocation a classifier makes.
#[repr(C, align(16))]
struct Bytes(UnsafeCell<[u8; ARENA_BYTES]>);

/// A bump allocator over a static array of `ARENA_BYTES`, falling back to
/// [`System`].
pub struct Arena {
    bytes: Bytes,
    /// Bytes of the arena handed out (the next allocation starts here,
    /// aligned).
    used: Cell<usize>,
}

// SAFETY: a wasm32 guest without the atomics feature has one thread. On any
// other target the arena is not `Sync`, so it cannot be a global allocator
// there (its bump pointer is a plain `Cell`).
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Sync for Arena {}

impl Arena {
    /// An empty arena.
    pub const fn new() -> Self {
        Self { bytes: Bytes(UnsafeCell::new([0; ARENA_BYTES])), used: Cell::new(0) }
    }

    fn base(&self) -> usize {
        self.bytes.0.get() as usize
    }

    /// Whether `ptr` was handed out by the arena.
    fn owns(&self, ptr: *mut u8) -> bool {
        let at = ptr as usize;
        at >= self.base() && at < self.base() + ARENA_BYTES
    }

    /// `size` bytes at `align` from the arena, if they fit.
    fn bump(&self, size: usize, align: usize) -> Option<*mut u8> {
        let start = (self.base() + self.used.get()).checked_next_multiple_of(align)?;
        let end = start.checked_add(size)?;
        (end <= self.base() + ARENA_BYTES).then(|| {
            self.used.set(end - self.base());
            start as *mut u8
        })
    }

    /// Whether the allocation at `ptr` of `size` bytes is the arena's last.
    fn is_last(&self, ptr: *mut u8, size: usize) -> bool {
        ptr as usize + size == self.base() + self.used.get()
    }
}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every pointer handed out is either a fresh, aligned, unaliased
// range of the arena below `used` or comes from `System`; arena pointers are
// never passed to `System` and the reverse (told apart by address), and a
// range is handed out again only after it was freed as the last allocation.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout.size(), layout.align()) {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !self.owns(ptr) {
            // SAFETY: not the arena's, so `System` handed it out with `layout`.
            return unsafe { System.dealloc(ptr, layout) };
        }
        if self.is_last(ptr, layout.size()) {
            self.used.set(ptr as usize - self.base());
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The last allocation grows or shrinks in place while it fits.
        if self.owns(ptr)
            && self.is_last(ptr, layout.size())
            && let Some(end) = (ptr as usize).checked_add(new_size)
            && end <= self.base() + ARENA_BYTES
        {
            self.used.set(end - self.base());
            return ptr;
        }
        if !self.owns(ptr) {
            // SAFETY: `System`'s allocation, resized by `System` (it may
            // move it there; it never lands in the arena).
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `realloc`'s contract gives a valid layout for `new_size`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for `alloc`.
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both ranges are valid for the smaller size and distinct
            // (the old one is not the last, or the new one did not fit after it).
            unsafe { core::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
            // SAFETY: the old allocation, with its layout.
            unsafe { self.dealloc(ptr, layout) };
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn bumps_aligned_reuses_the_last_and_falls_back_when_full() {
        let arena = Box::new(Arena::new());
        unsafe {
            let a = arena.alloc(layout(3, 1));
            let b = arena.alloc(layout(8, 8));
            assert!(arena.owns(a) && arena.owns(b));
            assert_eq!(b as usize % 8, 0);
            assert!(b as usize >= a as usize + 3);
            // Freeing the last gives its bytes back; freeing another does not.
            arena.dealloc(b, layout(8, 8));
            assert_eq!(arena.alloc(layout(8, 8)), b);
            // The last grows in place; a copy keeps the bytes.
            b.write_bytes(7, 8);
            let grown = arena.realloc(b, layout(8, 8), 64);
            assert_eq!(grown, b);
            let c = arena.alloc(layout(1, 1));
            let moved = arena.realloc(grown, layout(64, 8), 128);
            assert_ne!(moved, grown);
            assert_eq!(std::slice::from_raw_parts(moved, 8), [7; 8]);
            // Too big for what is left: the system allocator's, and back.
            let big = arena.alloc(layout(ARENA_BYTES, 1));
            assert!(!big.is_null() && !arena.owns(big));
            big.write_bytes(1, ARENA_BYTES);
            let bigger = arena.realloc(big, layout(ARENA_BYTES, 1), 2 * ARENA_BYTES);
            assert!(!arena.owns(bigger));
            arena.dealloc(bigger, layout(2 * ARENA_BYTES, 1));
            arena.dealloc(c, layout(1, 1));
        }
    }
}
