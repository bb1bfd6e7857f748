//! The package reader's memory bound (issue 53, item 3): reading a package takes at most
//! 256 MiB whatever its header asks for — the header's own bounds (32 MiB, 131,072 values per
//! array, 16 MiB of paths) measured here at their limits with a counting allocator, plus the
//! decompressor's 128 MiB, which liblzma and zstd enforce themselves (the unit tests hand them
//! streams asking for 2 GiB). One test in its own binary: the allocator counts the process.

#![allow(clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "support/craft.rs"]
mod craft;

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = NOW.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        NOW.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static A: Counting = Counting;

/// The most one reading may take of the heap, beside the decompressor's bound: 128 MiB.
const HEAP_BOUND: usize = 128 << 20;

#[test]
fn a_header_at_every_bound_is_read_within_the_memory_bound() {
    use gpuhost_host::rpmfile::{self, FileInfo, Want};
    // 131,070 files with 120-byte folder names (15.8 MiB of paths), one folder each: every
    // array at its bound, the paths just under theirs.
    let n = (1 << 17) - 2;
    let mut files = vec![craft::File::dir("/var/r", 1)];
    for i in 0..n {
        let dir = format!("/var/r/{:0>112}", i);
        files.push(craft::File::reg(&format!("{dir}/f"), b"", i as u32 + 2));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.rpm");
    let mut c = craft::Craft::new(files);
    c.compressor = "gzip";
    std::fs::write(&file, c.build()).expect("write");
    drop(c);
    let allowed = ["/var/r".to_string()];
    let none = |_: &FileInfo| false;
    let want = Want {
        allowed: &allowed,
        select: &none,
    };
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let read = rpmfile::verify(&file, &want);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    eprintln!("peak heap while reading: {} MiB", peak >> 20);
    // The folders' entries are not in the payload: the reading ends refused or read; either
    // way within the bound.
    drop(read);
    assert!(peak < HEAP_BOUND, "{} MiB", peak >> 20);
}
