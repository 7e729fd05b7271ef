//! Streaming one output pipe to a file with bounded memory.
//!
//! Every chunk read from the pipe is written to disk at once; the only things held in memory
//! are the current unterminated line (up to [`LINE_CAP`] bytes — a longer line is counted and
//! written but not held whole) and the last [`TAIL_LINES`] lines for the evidence. Lines are
//! found with `memchr`, and for plain text only the lines that can still end up in the tail
//! are turned into strings, so gigabytes of output cost a scan, not an allocation per line.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::RunnerError;
use super::progress::{CaptureFormat, LineSignal, Stream};

/// The longest line held in memory for classification and prompt detection.
pub const LINE_CAP: usize = 256 * 1024;
/// How many lines of output the evidence keeps.
pub const TAIL_LINES: usize = 50;
/// The longest line kept in the tail, so the metadata stays readable.
const TAIL_LINE_CAP: usize = 4096;

/// One line of the output tail.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct TailLine {
    /// The stream it came from.
    pub stream: Stream,
    /// Its text (invalid UTF-8 replaced, long lines cut with a marker).
    pub text: String,
}

/// The last lines of both streams, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    lines: VecDeque<TailLine>,
}

impl Tail {
    fn push(&mut self, stream: Stream, bytes: &[u8], full_length: usize) {
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        let kept = &bytes[..bytes.len().min(TAIL_LINE_CAP)];
        let mut text = String::from_utf8_lossy(kept).into_owned();
        if full_length > kept.len() {
            text.push_str(&format!(" …[{} more bytes]", full_length - kept.len()));
        }
        self.lines.push_back(TailLine { stream, text });
    }

    /// The collected lines, oldest first.
    pub(crate) fn into_lines(self) -> Vec<TailLine> {
        self.lines.into()
    }
}

/// What a chunk of output told the supervisor.
#[derive(Debug, Default)]
pub(crate) struct ChunkSignals {
    /// Progress was made.
    pub progress: bool,
    /// Retry/reconnect noise was seen.
    pub noise: bool,
    /// The highest cumulative cost reported in the chunk.
    pub reported_cost_usd: Option<f64>,
}

impl ChunkSignals {
    fn absorb(&mut self, signal: LineSignal) {
        self.progress |= signal.progress;
        self.noise |= signal.noise;
        if let Some(cost) = signal.reported_cost_usd {
            self.reported_cost_usd =
                Some(self.reported_cost_usd.map_or(cost, |seen| seen.max(cost)));
        }
    }
}

/// One output pipe being captured.
#[derive(Debug)]
pub(crate) struct StreamCapture {
    stream: Stream,
    format: CaptureFormat,
    file: File,
    /// Bytes written so far.
    pub bytes: u64,
    /// Complete lines seen so far (a final unterminated line is counted at the end).
    pub lines: u64,
    partial: Vec<u8>,
    partial_length: usize,
    /// The most bytes written to the file, if limited.
    pub limit: Option<u64>,
    /// More than `limit` bytes arrived: the rest was dropped.
    pub over_limit: bool,
    /// Where the stream is written.
    pub path: PathBuf,
    /// Writing to the file failed (the disk is full, …): nothing more is written.
    pub write_error: Option<std::io::ErrorKind>,
}

impl StreamCapture {
    /// Creates the file that receives the stream, as a new file: whatever held the name (an
    /// earlier attempt's capture, or a link an agent planted) is removed, never written through.
    pub(crate) fn create(
        stream: Stream,
        format: CaptureFormat,
        path: &Path,
    ) -> Result<Self, RunnerError> {
        let file = crate::artifacts::safe_files::create_new(path, 0o666)
            .map_err(|error| RunnerError::io("create", path, error))?;
        Ok(StreamCapture {
            stream,
            format,
            file,
            bytes: 0,
            lines: 0,
            partial: Vec::new(),
            partial_length: 0,
            limit: None,
            over_limit: false,
            path: path.to_path_buf(),
            write_error: None,
        })
    }

    /// Keeps at most `limit` bytes: what arrives past it is neither written nor examined.
    pub(crate) fn limited(mut self, limit: Option<u64>) -> Self {
        self.limit = limit;
        self
    }

    /// Writes a chunk to disk and examines the lines it completes.
    pub(crate) fn ingest(
        &mut self,
        chunk: &[u8],
        tail: &mut Tail,
    ) -> std::io::Result<ChunkSignals> {
        let chunk = match self.limit {
            Some(limit) if self.bytes + chunk.len() as u64 > limit => {
                self.over_limit = true;
                let room = limit.saturating_sub(self.bytes) as usize;
                &chunk[..room.min(chunk.len())]
            }
            _ => chunk,
        };
        if chunk.is_empty() || self.write_error.is_some() {
            return Ok(ChunkSignals::default());
        }
        if let Err(error) = self.file.write_all(chunk) {
            self.write_error = Some(error.kind());
            return Err(error);
        }
        self.bytes += chunk.len() as u64;
        if !self.format.examines_lines() {
            self.ingest_text(chunk, tail);
            return Ok(ChunkSignals {
                progress: true,
                ..ChunkSignals::default()
            });
        }
        let mut signals = ChunkSignals::default();
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', chunk) {
            self.extend_partial(&chunk[start..end]);
            start = end + 1;
            signals.absorb(self.complete_line(tail));
        }
        self.extend_partial(&chunk[start..]);
        Ok(signals)
    }

    /// Plain text needs only a line count and the lines that can reach the tail: count
    /// newlines in one vectorised pass, then walk back from the end for the last few.
    fn ingest_text(&mut self, chunk: &[u8], tail: &mut Tail) {
        let newlines = count_newlines(chunk);
        if newlines == 0 {
            self.extend_partial(chunk);
            return;
        }
        let kept = newlines.min(TAIL_LINES);
        // The ends of the kept lines, preceded by the end of the line before them if any.
        let mut ends: Vec<usize> = memchr::memrchr_iter(b'\n', chunk).take(kept + 1).collect();
        ends.reverse();
        let mut start = 0;
        if ends.len() > kept {
            start = ends.remove(0) + 1;
            self.lines += (newlines - kept) as u64;
            self.partial.clear();
            self.partial_length = 0;
        }
        for end in ends {
            self.extend_partial(&chunk[start..end]);
            start = end + 1;
            self.complete_line(tail);
        }
        self.extend_partial(&chunk[start..]);
    }

    /// The held line is complete: count it, classify it, keep it in the tail.
    fn complete_line(&mut self, tail: &mut Tail) -> LineSignal {
        self.lines += 1;
        let line = trim_carriage_return(&self.partial);
        let signal = if self.format.examines_lines() {
            self.format.classify(self.stream, line)
        } else {
            LineSignal::default()
        };
        tail.push(self.stream, line, self.partial_length);
        self.partial.clear();
        self.partial_length = 0;
        signal
    }

    /// The current unterminated line when it may be a question: held whole, and not the
    /// start of a JSON event of a structured stream cut by a chunk boundary.
    pub(crate) fn question_candidate(&self) -> Option<&[u8]> {
        let structured_event = self.format.examines_lines() && self.partial.first() == Some(&b'{');
        self.whole_partial_line().filter(|_| !structured_event)
    }

    /// The current unterminated line, when it is held whole.
    pub(crate) fn whole_partial_line(&self) -> Option<&[u8]> {
        (!self.partial.is_empty() && self.partial_length == self.partial.len())
            .then_some(&self.partial[..])
    }

    /// Ends the stream: a final unterminated line still counts and is classified.
    pub(crate) fn finish(&mut self, tail: &mut Tail) -> ChunkSignals {
        let mut signals = ChunkSignals::default();
        if self.partial_length > 0 {
            self.lines += 1;
            if self.format.examines_lines() {
                signals.absorb(self.format.classify(self.stream, &self.partial));
            }
            tail.push(self.stream, &self.partial, self.partial_length);
            self.partial.clear();
            self.partial_length = 0;
        }
        signals
    }

    /// Flushes the file to the kernel.
    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }

    /// The file's name, for causes (`stdout.txt`).
    pub(crate) fn file_name(&self) -> String {
        self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        )
    }

    /// Gives back up to `room` bytes of disk by cutting the end of the file (its first bytes
    /// stay): what a capture that filled the disk gives so the step can still be recorded.
    /// Returns the bytes dropped.
    pub(crate) fn release_room(&mut self, room: u64) -> u64 {
        let Ok(length) = self.file.metadata().map(|meta| meta.len()) else {
            return 0;
        };
        let kept = length.saturating_sub(room);
        if self.file.set_len(kept).is_err() {
            return 0;
        }
        self.bytes = self.bytes.min(kept);
        length - kept
    }

    fn extend_partial(&mut self, piece: &[u8]) {
        let room = LINE_CAP.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&piece[..piece.len().min(room)]);
        self.partial_length += piece.len();
    }
}

/// Counts `\n` bytes. Per-block `u8` counters let the compiler compare 16 bytes per
/// instruction (a `usize` counter per byte compiles to 2 bytes per step and dominated the
/// capture profile); a block of at most 255 bytes cannot overflow them.
fn count_newlines(bytes: &[u8]) -> usize {
    bytes
        .chunks(240)
        .map(|block| {
            let in_block = block
                .iter()
                .fold(0u8, |count, &byte| count + u8::from(byte == b'\n'));
            usize::from(in_block)
        })
        .sum()
}

fn trim_carriage_return(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(format: CaptureFormat) -> (tempfile::TempDir, StreamCapture) {
        let dir = tempfile::tempdir().unwrap();
        let capture =
            StreamCapture::create(Stream::Stdout, format, &dir.path().join("out")).unwrap();
        (dir, capture)
    }

    #[test]
    fn lines_split_across_chunks_are_joined() {
        let (_dir, mut capture) = capture(CaptureFormat::Text);
        let mut tail = Tail::default();
        capture.ingest(b"hel", &mut tail).unwrap();
        capture.ingest(b"lo\nwor", &mut tail).unwrap();
        assert_eq!(capture.whole_partial_line(), Some(&b"wor"[..]));
        capture.finish(&mut tail);
        let texts: Vec<_> = tail
            .into_lines()
            .into_iter()
            .map(|line| line.text)
            .collect();
        assert_eq!(texts, ["hello", "wor"]);
        assert_eq!(capture.lines, 2);
        assert_eq!(capture.bytes, 9);
    }

    #[test]
    fn newline_count_matches_a_naive_count() {
        let text: Vec<u8> = (0..10_000u32)
            .map(|index| if index % 7 == 0 { b'\n' } else { b'a' })
            .collect();
        for length in [0, 1, 239, 240, 241, 10_000] {
            let naive = text[..length].iter().filter(|&&byte| byte == b'\n').count();
            assert_eq!(count_newlines(&text[..length]), naive);
        }
    }

    #[test]
    fn tail_keeps_the_last_fifty_lines() {
        let (_dir, mut capture) = capture(CaptureFormat::Text);
        let mut tail = Tail::default();
        let text: String = (0..200).map(|number| format!("line {number}\n")).collect();
        capture.ingest(text.as_bytes(), &mut tail).unwrap();
        let lines = tail.into_lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0].text, "line 150");
        assert_eq!(lines[49].text, "line 199");
        assert_eq!(capture.lines, 200);
    }

    #[test]
    fn a_json_event_cut_by_a_chunk_boundary_is_never_a_question() {
        let (_dir, mut json) = capture(CaptureFormat::ClaudeStreamJson);
        let mut tail = Tail::default();
        json.ingest(br#"{"type":"assistant","text":"Continue? [y/N]"#, &mut tail)
            .unwrap();
        assert_eq!(json.question_candidate(), None);
        let (_dir, mut text) = capture(CaptureFormat::Text);
        text.ingest(b"Continue? [y/N] ", &mut tail).unwrap();
        assert_eq!(text.question_candidate(), Some(&b"Continue? [y/N] "[..]));
    }

    #[test]
    fn overlong_lines_are_counted_but_not_held() {
        let (_dir, mut capture) = capture(CaptureFormat::ClaudeStreamJson);
        let mut tail = Tail::default();
        let chunk = vec![b'x'; 100_000];
        for _ in 0..5 {
            capture.ingest(&chunk, &mut tail).unwrap();
        }
        assert!(capture.partial.len() <= LINE_CAP);
        assert_eq!(capture.whole_partial_line(), None);
        capture.ingest(b"\n", &mut tail).unwrap();
        let lines = tail.into_lines();
        assert!(
            lines[0]
                .text
                .ends_with(&format!("…[{} more bytes]", 500_000 - TAIL_LINE_CAP))
        );
    }
}
