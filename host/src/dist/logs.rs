//! Tests of csrc/logs.cpp's filter on libtorch's log (what of c10's records reaches the user
//! in a data-parallel run), on records c10's own logger formats.

use std::ffi::{c_char, c_int, CStr, CString};

extern "C" {
    fn fe_logs_filter_text(text: *const c_char) -> *mut c_char;
    fn fe_logs_c10_record(severity: c_int, message: *const c_char, with_error: bool)
        -> *mut c_char;
}

fn owned(text: *mut c_char) -> String {
    assert!(!text.is_null());
    // SAFETY: a NUL-terminated string malloc'd by the shim, freed here once copied.
    unsafe {
        let copy = CStr::from_ptr(text).to_string_lossy().into_owned();
        libc::free(text.cast());
        copy
    }
}

/// What c10's logger writes for `message` at `severity` (1 WARNING, 2 ERROR), with a real
/// c10::Error's message and backtrace appended when `with_error`.
fn record(severity: c_int, message: &str, with_error: bool) -> String {
    let message = CString::new(message).unwrap();
    // SAFETY: a valid C string; the result is owned by `owned`.
    owned(unsafe { fe_logs_c10_record(severity, message.as_ptr(), with_error) })
}

fn filtered(text: &str) -> String {
    let text = CString::new(text).unwrap();
    // SAFETY: as above.
    owned(unsafe { fe_logs_filter_text(text.as_ptr()) })
}

const WATCHDOG: &str = "[PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.";
const DESYNC: &str = "[PG ID 0 PG GUID 0(default_pg) Rank 0] Desync debug report: rank 1 joined but did not finish collective #42";
const STORE: &str = "[c10d] The client socket has failed to connect to [127.0.0.1]:29500 (errno: 111 - Connection refused).";

#[test]
fn c10_records_look_as_the_filter_expects() {
    let text = record(2, WATCHDOG, true);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("[E"), "{text}");
    assert!(first.ends_with(WATCHDOG), "{text}");
    assert!(text.contains("Exception raised from "), "{text}");
    assert!(text.lines().any(|l| l.starts_with("frame #")), "{text}");
}

#[test]
fn watchdog_and_desync_reports_pass_without_their_backtraces() {
    let text = [
        record(2, WATCHDOG, true),
        record(1, STORE, true),
        record(1, DESYNC, false),
    ]
    .concat();
    let kept = filtered(&text);
    let lines: Vec<&str> = kept.lines().collect();
    assert_eq!(lines.len(), 3, "{kept}");
    assert!(lines[0].ends_with(WATCHDOG), "{kept}");
    // The error's message stays; its backtrace goes.
    assert_eq!(lines[1], "the operation failed", "{kept}");
    assert!(lines[2].ends_with(DESYNC), "{kept}");
}

#[test]
fn store_noise_and_other_records_are_dropped() {
    let text = [
        record(1, STORE, true),
        record(
            2,
            "[c10d] Failed to recv, got 0 bytes. Connection was likely closed.",
            true,
        ),
        record(1, "Warning: a libtorch op's deprecation notice", false),
    ]
    .concat();
    assert_eq!(filtered(&text), "");
}
