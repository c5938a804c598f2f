//! hakmem as Rust's global allocator.
//!
//! ```
//! use hakmem::HakMem;
//!
//! #[global_allocator]
//! static GLOBAL: HakMem = HakMem;
//!
//! let v: Vec<u64> = (0..1000).collect();
//! assert_eq!(v.iter().sum::<u64>(), 499_500);
//! ```
//!
//! Only Rust's allocations go to hakmem; C libraries linked into the same
//! program keep libc's malloc (to give them hakmem too, preload
//! `libhakmem.so` instead: `hakmem -- your-program`). Options and
//! statistics are those of the C library (`docs/options.md`): the
//! `HAKMEM_*` environment variables apply, [`set_option`] changes one while
//! the program runs, [`stats_text`] and [`stats_json`] return the report
//! that `HAKMEM_STATS=1` prints at exit.
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_void};
use std::ptr;

use hakmem_sys as sys;

/// Every block of at least 16 bytes is 16-byte aligned; a smaller one is
/// aligned to the largest power of two not above its size.
const MIN_ALIGN: usize = 16;

/// The hakmem allocator, for `#[global_allocator]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct HakMem;

/// malloc's alignment serves the layout.
#[inline]
fn malloc_aligns(layout: &Layout) -> bool {
    layout.align() <= MIN_ALIGN && layout.align() <= layout.size()
}

#[inline]
unsafe fn alloc_aligned(layout: &Layout) -> *mut u8 {
    let mut p = ptr::null_mut();
    let align = layout.align().max(std::mem::size_of::<usize>());
    if sys::hak_posix_memalign(&mut p, align, layout.size()) != 0 {
        return ptr::null_mut();
    }
    p as *mut u8
}

unsafe impl GlobalAlloc for HakMem {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if malloc_aligns(&layout) {
            sys::hak_malloc(layout.size()) as *mut u8
        } else {
            alloc_aligned(&layout)
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if malloc_aligns(&layout) {
            return sys::hak_calloc(1, layout.size()) as *mut u8;
        }
        let p = alloc_aligned(&layout);
        if !p.is_null() {
            ptr::write_bytes(p, 0, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, _layout: Layout) {
        sys::hak_free(p as *mut c_void);
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        if malloc_aligns(&new_layout) {
            return sys::hak_realloc(p as *mut c_void, new_size) as *mut u8;
        }
        let q = alloc_aligned(&new_layout);
        if !q.is_null() {
            ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
            sys::hak_free(p as *mut c_void);
        }
        q
    }
}

/// The bytes usable in a block hakmem handed out (at least its size).
///
/// # Safety
/// `p` must be a live block of hakmem's (a pointer from any other
/// allocator stops the program with a one-line message).
pub unsafe fn usable_size(p: *const u8) -> usize {
    sys::hak_usable_size(p as *const c_void)
}

/// Gives free memory back to the OS now (malloc_trim); true if any was.
pub fn trim() -> bool {
    unsafe { sys::hak_trim() != 0 }
}

/// Why an option could not be read or set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionError {
    /// No option has this name (names as in `HAKMEM_<NAME>`, without the prefix).
    Unknown(String),
    /// The value is not valid for the option (out of range, not a choice).
    Invalid { name: String, value: String },
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::Unknown(name) => write!(f, "hakmem: unknown option {}", name),
            OptionError::Invalid { name, value } => write!(f, "hakmem: {} is not a valid value of {}", value, name),
        }
    }
}

impl std::error::Error for OptionError {}

/// The index of the option called `name` ("PURGE_DELAY_MS", or with its
/// `HAKMEM_` prefix; any case).
fn option_index(name: &str) -> Result<sys::hak_option_t, OptionError> {
    let bare = name.strip_prefix("HAKMEM_").unwrap_or(name);
    for i in 0.. {
        let p = unsafe { sys::hak_option_name(i) };
        if p.is_null() {
            break;
        }
        if unsafe { CStr::from_ptr(p) }.to_bytes().eq_ignore_ascii_case(bare.as_bytes()) {
            return Ok(i);
        }
    }
    Err(OptionError::Unknown(name.to_string()))
}

/// An option's value now, as a number (a choice's index, a boolean's 0 or
/// 1). Text options such as STATS_FILE read as 0.
pub fn option(name: &str) -> Result<i64, OptionError> {
    option_index(name).map(|i| unsafe { sys::hak_option_get(i) } as i64)
}

/// Sets an option as `HAKMEM_<NAME>=value` would ("lean", "64M", "on").
/// The string of a text option is kept for the rest of the program.
pub fn set_option(name: &str, value: &str) -> Result<(), OptionError> {
    let i = option_index(name)?;
    let invalid = || OptionError::Invalid { name: name.to_string(), value: value.to_string() };
    let text = CString::new(value).map_err(|_| invalid())?;
    if unsafe { sys::hak_option_set_text(i, text.as_ptr()) } != 0 {
        return Err(invalid());
    }
    // A text option's string must outlive its use by the library.
    if !unsafe { sys::hak_option_get_string(i) }.is_null() {
        std::mem::forget(text);
    }
    Ok(())
}

unsafe extern "C" fn append(text: *const c_char, arg: *mut c_void) {
    let out = &mut *(arg as *mut Vec<u8>);
    out.extend_from_slice(CStr::from_ptr(text).to_bytes());
}

fn report(print: unsafe extern "C" fn(Option<sys::hak_write_fn>, *mut c_void)) -> String {
    let mut out: Vec<u8> = Vec::new();
    unsafe { print(Some(append), &mut out as *mut Vec<u8> as *mut c_void) };
    String::from_utf8_lossy(&out).into_owned()
}

/// The statistics report, as `HAKMEM_STATS=1` prints it at exit.
pub fn stats_text() -> String {
    report(sys::hak_stats_print)
}

/// The statistics as one JSON object (`HAKMEM_STATS=json`).
pub fn stats_json() -> String {
    report(sys::hak_stats_print_json)
}

/// Every option: values, defaults per profile, meaning (`hakmem --options`).
pub fn options_text() -> String {
    report(sys::hak_options_print)
}

/// Counters start again from zero (gauges such as live bytes stay).
pub fn stats_reset() {
    unsafe { sys::hak_stats_reset() }
}
