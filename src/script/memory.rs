//! The process's resident memory, read while a script runs so an evaluation that makes the
//! process grow past its budget is stopped.
//!
//! Rhai's data-size limits bound one value at a time and do not count map keys, so they do not
//! bound what a script holds in all: 256 variables of 4 MiB strings, or a map whose keys are
//! 4 MiB strings (`m[s + i] = 1`), pass every count. The host therefore watches the process
//! itself: `/proc/self/statm`, kept open and read with one `pread` (a few microseconds), at
//! most once per [`READING_INTERVAL`] of evaluation time. Where there is no `/proc` (not
//! Linux) there is no reading and only the per-value limits and the deadline apply.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How much evaluation time may pass between two readings.
pub(crate) const READING_INTERVAL: Duration = Duration::from_millis(1);

/// `/proc/self/statm` and the page size, or `None` where they cannot be had.
fn statm() -> Option<&'static (File, u64)> {
    static STATM: OnceLock<Option<(File, u64)>> = OnceLock::new();
    STATM
        .get_or_init(|| {
            let file = crate::proc::own_memory_file()?;
            let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
                .ok()
                .flatten()
                .and_then(|size| u64::try_from(size).ok())?;
            Some((file, page))
        })
        .as_ref()
}

/// The bytes of the process's memory resident now, when the platform tells.
pub(crate) fn resident_bytes() -> Option<u64> {
    let (file, page) = statm()?;
    let mut buffer = [0u8; 128];
    let read = file.read_at(&mut buffer, 0).ok()?;
    let text = std::str::from_utf8(&buffer[..read]).ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(*page))
}

/// The memory budget of the evaluation in progress.
#[derive(Debug, Default)]
pub(crate) struct MemoryWatch {
    /// What the process held at the first reading of the evaluation.
    baseline: Option<u64>,
    /// When the next reading is due.
    next_reading: Option<Instant>,
}

impl MemoryWatch {
    /// A fresh watch for an evaluation that starts `now`. The first reading, the baseline, is
    /// taken one interval in: the many evaluations that end sooner pay for no reading at all
    /// (what a script allocates in its first millisecond is not counted).
    pub(crate) fn start(&mut self, now: Instant) {
        self.baseline = None;
        self.next_reading = Some(now + READING_INTERVAL);
    }

    /// No evaluation in progress.
    pub(crate) fn stop(&mut self) {
        self.baseline = None;
        self.next_reading = None;
    }

    /// True when a reading due at `now` finds the process grown by more than `budget` bytes
    /// since the first reading of the evaluation; `read` gives the resident bytes.
    pub(crate) fn exceeded(
        &mut self,
        now: Instant,
        budget: u64,
        read: impl FnOnce() -> Option<u64>,
    ) -> bool {
        let Some(due) = self.next_reading else {
            return false;
        };
        if now < due {
            return false;
        }
        self.next_reading = Some(now + READING_INTERVAL);
        let Some(resident) = read() else {
            // No reading on this platform: stop asking.
            self.next_reading = None;
            return false;
        };
        match self.baseline {
            None => {
                self.baseline = Some(resident);
                false
            }
            Some(baseline) => resident.saturating_sub(baseline) > budget,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reading_is_the_baseline_and_growth_past_the_budget_is_caught() {
        let start = Instant::now();
        let mut watch = MemoryWatch::default();
        // Outside an evaluation nothing is read.
        assert!(!watch.exceeded(start, 10, || panic!("read outside an evaluation")));
        watch.start(start);
        // Not due yet: no reading.
        assert!(!watch.exceeded(start, 10, || panic!("read before it was due")));
        let first = start + READING_INTERVAL;
        assert!(!watch.exceeded(first, 10, || Some(1_000)));
        let later = first + READING_INTERVAL;
        assert!(!watch.exceeded(later, 10, || Some(1_010)));
        let later = later + READING_INTERVAL;
        assert!(watch.exceeded(later, 10, || Some(1_011)));
        watch.stop();
        assert!(!watch.exceeded(later + READING_INTERVAL, 10, || Some(u64::MAX)));
    }

    #[test]
    fn the_resident_memory_of_this_process_can_be_read_on_linux() {
        if cfg!(target_os = "linux") {
            let resident = resident_bytes().expect("a reading on Linux");
            assert!(resident > 0);
        }
    }
}
