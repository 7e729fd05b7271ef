//! Run ids that sort by start time: `YYYYMMDDTHHMMSSZ-xxxxxx`.
//!
//! The six hex digits are a sub-second clock and a random part: the first four count the
//! 65 536ths of the second the id was made in, the last two are random. So ids sort by time
//! to within about 15 µs (a run started later in the same second sorts later), and two runs
//! started in the same 15 µs by different processes differ with probability 255/256; ids made
//! by one process always differ, and always increase.

use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

use crate::ids::RunId;

/// A new run id for the current time.
pub fn new_run_id() -> RunId {
    let now = jiff::Timestamp::now();
    let seconds = now.as_second();
    let fraction = (u64::from(now.subsec_nanosecond().unsigned_abs()) << 16) / 1_000_000_000;
    // RandomState is seeded from the OS per process; mixing in the time and a counter makes two
    // ids of one process differ in their random part too.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_i128(now.as_nanosecond());
    hasher.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let mut suffix = (fraction << 8) | (hasher.finish() & 0xff);
    // Within one process, a later id is never smaller (the clock may repeat a tick, or step
    // back): it takes the next value of the same second instead.
    static LAST: Mutex<(i64, u64)> = Mutex::new((i64::MIN, 0));
    let mut stamp_second = seconds;
    if let Ok(mut last) = LAST.lock() {
        if seconds <= last.0 {
            stamp_second = last.0;
            suffix = suffix.max(last.1 + 1).min(0xff_ffff);
        }
        *last = (stamp_second, suffix);
    }
    let stamp = jiff::Timestamp::from_second(stamp_second)
        .unwrap_or(now)
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    RunId::new(format!("{stamp}-{suffix:06x}"))
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

    #[test]
    fn ids_made_later_sort_later_within_one_second() {
        let ids: Vec<String> = (0..2000).map(|_| new_run_id().to_string()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
            assert!(is_run_id(&pair[1]), "{}", pair[1]);
        }
    }

    #[test]
    fn the_suffix_starts_with_the_fraction_of_the_second() {
        let before = jiff::Timestamp::now();
        let id = new_run_id().to_string();
        let after = jiff::Timestamp::now();
        let tick = |at: jiff::Timestamp| {
            (u64::from(at.subsec_nanosecond().unsigned_abs()) << 16) / 1_000_000_000
        };
        let found = u64::from_str_radix(&id[17..21], 16).unwrap();
        if before.as_second() == after.as_second() {
            assert!(tick(before) <= found && found <= tick(after), "{id}");
        }
    }
}
