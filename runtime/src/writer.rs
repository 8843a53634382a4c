//! The trace writer: frames appended to a memory-mapped file.
//!
//! Writing through a shared mapping means a record is in the kernel's page cache as
//! soon as it is copied, so a process that crashes right after loses nothing. The file
//! grows in chunks and is trimmed at a clean exit; after a crash its zero-filled tail
//! reads as end-of-data (see `trestle_abi::trace`).

use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use trestle_abi::trace::{frame_check, FRAME_HEADER};

const CHUNK: u64 = 1 << 20;

/// An open trace file.
pub struct TraceWriter {
    path: PathBuf,
    file: File,
    map: MmapMut,
    used: usize,
}

impl TraceWriter {
    /// Create `path` and map its first chunk.
    pub fn create(path: &Path) -> io::Result<Self> {
        let file = out_of_the_way(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)?,
        );
        file.set_len(CHUNK)?;
        // SAFETY: the file was just created by this process and nothing else maps it.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(TraceWriter {
            path: path.to_owned(),
            file,
            map,
            used: 0,
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written so far.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Append one framed record. The body goes in before the length word, so a crash
    /// mid-write leaves a length of 0 (end of data), never half a record.
    pub fn append(&mut self, body: &[u8]) -> io::Result<()> {
        let need = self.used + FRAME_HEADER + body.len() + FRAME_HEADER;
        if need > self.map.len() {
            let mut size = self.map.len() as u64;
            while (size as usize) < need {
                size += CHUNK.max(size / 2);
            }
            self.file.set_len(size)?;
            // SAFETY: as in `create`; the old mapping is dropped on assignment.
            self.map = unsafe { MmapMut::map_mut(&self.file)? };
        }
        let at = self.used;
        self.map[at + FRAME_HEADER..at + FRAME_HEADER + body.len()].copy_from_slice(body);
        self.map[at + 4..at + 8].copy_from_slice(&frame_check(body).to_le_bytes());
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.map[at..at + 4].copy_from_slice(&(body.len() as u32).to_le_bytes());
        self.used += FRAME_HEADER + body.len();
        Ok(())
    }

    /// Trim the file to what was written. No msync: the data is in the page cache,
    /// which outlives the process; waiting for the disk would only slow every run.
    pub fn close(self) -> io::Result<()> {
        drop(self.map);
        self.file.set_len(self.used as u64)
    }

    /// Let go of the mapping without trimming (after `fork`, the parent owns the file).
    pub fn abandon(self) {
        drop(self.map);
    }
}

/// `file` under a descriptor number near the top of the process's limit. Opened
/// under the lowest free number, the trace would take the descriptor the program's
/// next `open` or `pipe` gets in a replay, where no trace is open: every descriptor
/// a recorded call opened would be one higher than in its replay.
fn out_of_the_way(file: File) -> File {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur < 64 {
        return file;
    }
    let floor = lim.rlim_cur.min(1 << 16) as libc::c_int - 32;
    // SAFETY: duplicating a descriptor this function owns; on success the new one is
    // owned by the returned File and the old one closes with `file`.
    unsafe {
        let high = libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor);
        if high < 0 {
            return file;
        }
        File::from_raw_fd(high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::trace::{
        decode_trace, Record, RuntimeStats, TraceHeader, TRACE_MAGIC, TRACE_VERSION,
    };

    #[test]
    fn an_unclosed_trace_still_reads_back() {
        let dir = std::env::temp_dir().join(format!("trestle-writer-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("t.trace");
        let _ = std::fs::remove_file(&path);
        let mut w = TraceWriter::create(&path).unwrap();
        let h = TraceHeader {
            magic: TRACE_MAGIC,
            version: TRACE_VERSION,
            binary_id: 1,
            pid: 2,
            ppid: 3,
        };
        w.append(&bincode::serialize(&h).unwrap()).unwrap();
        let big = vec![7u8; (CHUNK as usize) + 10];
        let rec = Record::Stats(RuntimeStats {
            calls: big.len() as u64,
            ..Default::default()
        });
        w.append(&bincode::serialize(&rec).unwrap()).unwrap();
        w.append(&big).unwrap_or(()); // forces a remap; body is not a record
        drop(w); // as if the process died: no trim
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() as u64 > CHUNK);
        // The garbage third frame is reported, the first two decode.
        let err = decode_trace(&bytes).unwrap_err();
        assert!(err.what.contains("undecodable"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
