//! [`release_free_heap`]: hands heap memory the process has freed back to the operating
//! system. glibc keeps freed memory in per-thread arenas for reuse; after a large owner (a
//! model's engine, its tokenizer and grammar tables) is dropped, trimming turns that memory
//! back into free RAM instead of resident set.

/// Asks the C allocator to return its free heap pages to the operating system (glibc's
/// `malloc_trim`); does nothing on other C libraries. Takes milliseconds: call it after
/// freeing something large, not per request.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: `malloc_trim` takes no pointers; it walks glibc's own arenas under their
        // locks, so any thread may call it at any time.
        unsafe {
            malloc_trim(0);
        }
    }
}
