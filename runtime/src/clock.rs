//! The clock, as the program reads it: `time`, `gettimeofday` and `clock_gettime`
//! are renamed to the wrappers here, which add the shift a replay asks for
//! (`hooks::ENV_CLOCK_SHIFT`, seconds; none otherwise). A unit that differs from its
//! recording is replayed a second time with the clock shifted: memory the call
//! computed from the clock (mawk seeds `rand()` from it) then differs between the two
//! replays, and the host leaves it out of the comparison.

use std::sync::atomic::{AtomicI64, Ordering};
use trestle_abi::hooks;

/// The shift in seconds; [`UNREAD`] until the environment was read.
static SHIFT: AtomicI64 = AtomicI64::new(UNREAD);
const UNREAD: i64 = i64::MIN;

fn shift() -> libc::time_t {
    match SHIFT.load(Ordering::Relaxed) {
        UNREAD => read_shift(),
        s => s as libc::time_t,
    }
}

/// Read the shift from the environment (again): a replay server's child, whose
/// environment the request set after the server may have read the clock, reads it
/// before its `main`.
pub(crate) fn read_shift() -> libc::time_t {
    let s = std::env::var(hooks::ENV_CLOCK_SHIFT)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    SHIFT.store(s, Ordering::Relaxed);
    s as libc::time_t
}

/// `time`, shifted.
///
/// # Safety
/// As `time`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_time(t: *mut libc::time_t) -> libc::time_t {
    // SAFETY: forwarding without the caller's pointer, written below if given.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    let now = if now == -1 { now } else { now + shift() };
    if !t.is_null() {
        // SAFETY: the caller's pointer, as `time` would write it.
        unsafe { *t = now };
    }
    now
}

/// `gettimeofday`, shifted.
///
/// # Safety
/// As `gettimeofday`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_gettimeofday(
    tv: *mut libc::timeval,
    tz: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: forwarding.
    let r = unsafe { libc::gettimeofday(tv, tz.cast()) };
    if r == 0 && !tv.is_null() {
        // SAFETY: just written by the C library.
        unsafe { (*tv).tv_sec += shift() };
    }
    r
}

/// `clock_gettime`, shifted.
///
/// # Safety
/// As `clock_gettime`.
#[no_mangle]
pub unsafe extern "C" fn __trestle_clock_gettime(
    clock: libc::clockid_t,
    ts: *mut libc::timespec,
) -> libc::c_int {
    // SAFETY: forwarding.
    let r = unsafe { libc::clock_gettime(clock, ts) };
    if r == 0 && !ts.is_null() {
        // SAFETY: just written by the C library.
        unsafe { (*ts).tv_sec += shift() };
    }
    r
}
