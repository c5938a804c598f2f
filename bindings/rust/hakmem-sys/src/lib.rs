//! Raw bindings to hakmem's C API (`include/hakmem.h`), built from the C
//! sources by this crate's build script. The safe interface, a
//! `GlobalAlloc`, is the `hakmem` crate.
//!
//! `struct hak_stats` is not mirrored here: read the statistics as text or
//! JSON through [`hak_stats_print`] / [`hak_stats_print_json`].
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_long, c_void};

/// `hak_option_t`: an option's index; [`hak_option_name`] names them and
/// returns null past the last.
pub type hak_option_t = c_int;

/// Receives the pieces of a report, in order.
pub type hak_write_fn = unsafe extern "C" fn(text: *const c_char, arg: *mut c_void);

extern "C" {
    pub fn hak_malloc(size: usize) -> *mut c_void;
    pub fn hak_free(p: *mut c_void);
    pub fn hak_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn hak_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    pub fn hak_aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
    pub fn hak_posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int;
    pub fn hak_usable_size(p: *const c_void) -> usize;
    pub fn hak_free_sized(p: *mut c_void, size: usize);
    pub fn hak_free_aligned_sized(p: *mut c_void, alignment: usize, size: usize);
    pub fn hak_trim() -> c_int;

    pub fn hak_option_get(option: hak_option_t) -> c_long;
    pub fn hak_option_set(option: hak_option_t, value: c_long) -> c_int;
    pub fn hak_option_set_text(option: hak_option_t, text: *const c_char) -> c_int;
    pub fn hak_option_get_string(option: hak_option_t) -> *const c_char;
    pub fn hak_option_name(option: hak_option_t) -> *const c_char;
    pub fn hak_options_print(write: Option<hak_write_fn>, arg: *mut c_void);

    pub fn hak_stats_reset();
    pub fn hak_stats_print(write: Option<hak_write_fn>, arg: *mut c_void);
    pub fn hak_stats_print_json(write: Option<hak_write_fn>, arg: *mut c_void);
}
