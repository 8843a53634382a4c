//! Capturing system tests from a project's own test suite (`trestle capture`).
//!
//! Under `trestle capture -- COMMAND`, every process of a program built with
//! `trestle-cc` that starts writes one raw record into a directory of its own under
//! [`ENV_CAPTURE_DIR`]: what it was started with, what it read, and how it ended. The
//! host turns the records into system tests. The record is written by two processes:
//! the program, which notes the files it opens and the variables it asks for as it
//! goes (appended, one `write` per entry, so a crash loses none), and a supervisor the
//! runtime forks off at the start of `main`, which keeps the program's standard
//! streams and writes [`PROCESS`] once the program has ended.
//!
//! Every file of a record is bytes; lists are fields separated by NUL bytes, so no
//! path or argument needs escaping.

/// Environment variable: the directory records go to. Capturing is off without it.
pub const ENV_CAPTURE_DIR: &str = "TRESTLE_CAPTURE_DIR";
/// Environment variable: bytes kept at most of any one input (stdin, a file) and of
/// stdout and stderr; beyond it the record says how much there was.
pub const ENV_CAPTURE_MAX_INPUT: &str = "TRESTLE_CAPTURE_MAX_INPUT";
/// [`ENV_CAPTURE_MAX_INPUT`] when it is not set.
pub const DEFAULT_MAX_INPUT: u64 = 1 << 20;
/// Environment variable a captured program passes to the programs it starts: the
/// names of the records (in [`ENV_CAPTURE_DIR`]) of it and of the captured processes
/// that started it, separated by `:`. What a program started from a captured one
/// reads, the test of that one needs too: it is noted in each of those records.
pub const ENV_CAPTURE_ANCESTORS: &str = "TRESTLE_CAPTURE_ANCESTORS";
/// Version of the record layout; a host refuses records of another.
pub const CAPTURE_FORMAT: u32 = 1;

/// `argv`, each argument followed by a NUL.
pub const ARGV: &str = "argv";
/// The working directory at start, bytes.
pub const CWD: &str = "cwd";
/// The program's executable (`/proc/self/exe`), bytes.
pub const EXE: &str = "exe";
/// The executable of the process that started it, bytes (a program started by
/// itself is captured twice: once as the parent's run, once on its own).
pub const PARENT_EXE: &str = "parent-exe";
/// Variables that change a program's behaviour without it asking for them with
/// `getenv` (the locale's, the time zone), and those it asked for: `NAME` NUL `VALUE`
/// NUL, appended as they are seen.
pub const ENV: &str = "env";
/// Files the program, the processes it forked and the programs it started opened:
/// [`OPENED_FIELDS`] NUL-terminated fields per entry, appended at each open.
pub const OPENED: &str = "opened";
/// Fields per [`OPENED`] entry: access ([`ACCESS_READ`] ...), the path as the program
/// gave it, the path it resolved to, the name its content is stored under in the
/// record (empty when not stored), its size in bytes when opened, and
/// [`OPENED_SYMLINK`] or nothing.
pub const OPENED_FIELDS: usize = 6;
/// The last field of an [`OPENED`] entry whose path, as given, is a symbolic link.
pub const OPENED_SYMLINK: &str = "symlink";
/// Opened for reading only.
pub const ACCESS_READ: &str = "r";
/// Opened for reading and writing, its content kept.
pub const ACCESS_READ_WRITE: &str = "rw";
/// Opened for writing (or truncated, or created): output, not input.
pub const ACCESS_WRITE: &str = "w";
/// A FIFO or socket: what it gave cannot be read back.
pub const ACCESS_STREAM: &str = "stream";
/// A directory.
pub const ACCESS_DIRECTORY: &str = "dir";
/// Prefix of the names stored files get in a record (`in-PID-0`, `in-PID-1`, ...).
pub const STORED_PREFIX: &str = "in-";
/// The bytes read from stdin (from where it stood when the program started).
pub const STDIN: &str = "stdin";
/// The bytes written to stdout.
pub const STDOUT: &str = "stdout";
/// The bytes written to stderr.
pub const STDERR: &str = "stderr";
/// Written last, by the supervisor: `KEY VALUE...` lines ([`process_line`]).
pub const PROCESS: &str = "process";

/// What a standard stream was connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// A regular file: read or written in place.
    File,
    /// A pipe, FIFO or socket: passed through the supervisor, which keeps what went by.
    Pipe,
    /// A terminal: left alone, nothing kept.
    Terminal,
    /// Another device (`/dev/null`, `/dev/full`): left alone, so the program sees
    /// what it does of it (a write error on `/dev/full`); nothing kept.
    Device,
    /// Closed.
    Nothing,
    /// stdout and stderr are one and the same file or pipe: what is kept is both.
    Merged,
}

impl StreamKind {
    /// The word in [`PROCESS`].
    pub fn word(self) -> &'static str {
        match self {
            StreamKind::File => "file",
            StreamKind::Pipe => "pipe",
            StreamKind::Terminal => "terminal",
            StreamKind::Device => "device",
            StreamKind::Nothing => "nothing",
            StreamKind::Merged => "merged",
        }
    }

    /// Back from [`StreamKind::word`].
    pub fn from_word(w: &str) -> Option<StreamKind> {
        [
            StreamKind::File,
            StreamKind::Pipe,
            StreamKind::Terminal,
            StreamKind::Device,
            StreamKind::Nothing,
            StreamKind::Merged,
        ]
        .into_iter()
        .find(|k| k.word() == w)
    }
}

/// One line of [`PROCESS`]: `format N`, `version V`, `status exit N` or `status
/// signal N`, and per stream `stdin KIND TOTAL` (bytes there were; the record keeps
/// at most the maximum input).
pub fn process_line(key: &str, value: &str) -> String {
    format!("{key} {value}\n")
}

/// The NUL-separated fields of a list file.
pub fn split_fields(bytes: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = bytes.split(|&b| b == 0).collect();
    // The last field ends with a NUL too.
    if v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_split_at_nul_and_the_last_one_ends_with_it() {
        assert_eq!(
            split_fields(b"a\0\0b c\0"),
            vec![&b"a"[..], &b""[..], &b"b c"[..]]
        );
        assert!(split_fields(b"").is_empty());
    }

    #[test]
    fn stream_kinds_read_back_from_their_words() {
        for k in [
            StreamKind::File,
            StreamKind::Pipe,
            StreamKind::Terminal,
            StreamKind::Device,
            StreamKind::Nothing,
            StreamKind::Merged,
        ] {
            assert_eq!(StreamKind::from_word(k.word()), Some(k));
        }
    }
}
