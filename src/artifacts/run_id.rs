//! Run ids that sort by start time: `YYYYMMDDTHHMMSSZ-xxxxxx`.

use std::hash::{BuildHasher, Hasher};

use crate::ids::RunId;

/// A new run id for the current time, with six random hex digits.
pub fn new_run_id() -> RunId {
    let now = jiff::Timestamp::now();
    let stamp = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    // RandomState is seeded from the OS per process; mixing in the time and a counter makes two
    // ids of one process in one second differ too.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_i128(now.as_nanosecond());
    hasher.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    RunId::new(format!("{stamp}-{:06x}", hasher.finish() & 0xff_ffff))
}

/// Whether text has the shape of a run id (so it can be used as a folder name safely).
pub fn is_run_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 23
        && bytes[..8].iter().all(u8::is_ascii_digit)
        && bytes[8] == b'T'
        && bytes[9..15].iter().all(u8::is_ascii_digit)
        && bytes[15] == b'Z'
        && bytes[16] == b'-'
        && bytes[17..]
            .iter()
            .all(|byte| byte.is_ascii_hexdigit() && !byte.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_documented_shape_and_differ() {
        let first = new_run_id();
        let second = new_run_id();
        assert!(is_run_id(first.as_str()), "{first}");
        assert_ne!(first, second);
        assert!(!is_run_id("../../etc"));
        assert!(!is_run_id("20260101T000000Z-ABCDEF"));
    }
}
