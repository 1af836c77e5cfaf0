//! Parallel read → decode → chunk → hash of many files, streamed in bounded
//! batches so a multi-gigabyte corpus is never held in memory at once.
//!
//! Workers on a rayon pool of `workers` threads claim files one at a time
//! in input order; the consumer re-orders what they deliver and hands back
//! a ticket per delivered file, so workers run a bounded distance ahead of
//! it (backpressure) and never wait for each other.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::chunker::{chunk_markdown, RawChunk};
use crate::hashing::fingerprint;

/// Everything learned about one file.
pub struct FileResult {
    pub path: PathBuf,
    pub source: String,
    pub size: u64,
    pub mtime: f64,
    pub ino: u64,
    pub ctime: f64,
    pub fingerprint: String,
    /// The decoded document; `chunks` are ranges of it.
    pub text: Arc<String>,
    pub chunks: Vec<RawChunk>,
    pub error: Option<String>,
    pub invalid_utf8: bool,
}

#[derive(Clone, Copy)]
pub struct ChunkParams {
    pub max_chunk_size: usize,
    pub overlap_lines: i64,
    /// Files larger than this are reported, not read (0: no limit): one
    /// file's chunks are held together, so its size bounds the run's memory.
    pub max_file_bytes: u64,
}

impl FileResult {
    /// A file not read yet: no content, no error.
    fn empty(path: PathBuf) -> Self {
        let source = path.to_string_lossy().into_owned();
        FileResult {
            path,
            source,
            size: 0,
            mtime: 0.0,
            ino: 0,
            ctime: 0.0,
            fingerprint: String::new(),
            text: Arc::default(),
            chunks: Vec::new(),
            error: None,
            invalid_utf8: false,
        }
    }
}

pub fn process_file(path: PathBuf, params: ChunkParams) -> FileResult {
    let bad_name = path.to_str().is_none();
    let mut result = FileResult::empty(path);
    if bad_name {
        // Two such names could map to one lossy source string and collide.
        result.error = Some("file name is not valid UTF-8".into());
        return result;
    }
    let (meta, bytes) = match read_regular_file(&result.path, params.max_file_bytes) {
        Ok(found) => found,
        Err(message) => {
            result.error = Some(message);
            return result;
        }
    };
    result.mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    (result.ino, result.ctime) = crate::scanner::identity_of(&meta);
    result.size = bytes.len() as u64;
    result.fingerprint = fingerprint(&bytes);
    // simdutf8 validates several times faster than std on non-ASCII text.
    let text = if simdutf8::basic::from_utf8(&bytes).is_ok() {
        // SAFETY: validated just above.
        unsafe { String::from_utf8_unchecked(bytes) }
    } else {
        result.invalid_utf8 = true;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    result.chunks = chunk_markdown(&text, params.max_chunk_size, params.overlap_lines);
    result.text = Arc::new(text);
    result
}

/// `process_file`, with a panic turned into that file's error: a panic in a
/// pool job would abort the process, and an undelivered file would stall
/// the in-order stream.
fn process_file_caught(path: &Path, params: ChunkParams) -> FileResult {
    let owned = path.to_path_buf();
    std::panic::catch_unwind(|| process_file(owned, params)).unwrap_or_else(|_| {
        let mut result = FileResult::empty(path.to_path_buf());
        result.error = Some("internal error while chunking this file".into());
        result
    })
}

/// Opens `path` once and reads it if it is a regular file. The open never
/// blocks (a FIFO named `*.md` would block a plain open forever), and the
/// type check and the read see the same file.
pub fn read_regular_file(path: &Path, max_bytes: u64) -> Result<(fs::Metadata, Vec<u8>), String> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let mut file = options
        .open(path)
        .map_err(|e| crate::scanner::io_message(&e))?;
    let meta = file
        .metadata()
        .map_err(|e| crate::scanner::io_message(&e))?;
    if !meta.is_file() {
        return Err(if meta.is_dir() {
            "is a directory".into()
        } else {
            "not a regular file".into()
        });
    }
    if max_bytes > 0 && meta.len() > max_bytes {
        return Err(format!(
            "{:.1} MB, over the {} MB limit for one file (MEMSEARCH_MAX_FILE_MB raises it)",
            meta.len() as f64 / 1048576.0,
            max_bytes >> 20
        ));
    }
    let bytes =
        read_sized(&mut file, meta.len() as usize).map_err(|e| crate::scanner::io_message(&e))?;
    Ok((meta, bytes))
}

/// Reads a file whose size fstat gave as `size`. One read usually returns
/// the whole file; only a file that changed size since (or a filesystem that
/// returns short reads) needs the confirming read(s) of read_to_end.
/// Per-file syscalls are a large share of this stream's time on small files.
fn read_sized(file: &mut fs::File, size: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(size + 1);
    if read_once(file, &mut bytes)? != size {
        file.read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

/// One `read` into the spare capacity of `buf`; returns the bytes read.
fn read_once(file: &mut fs::File, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        let spare = buf.capacity() - buf.len();
        loop {
            // SAFETY: reads at most `spare` bytes into the vector's
            // allocated, unused tail; the length grows only by what the
            // kernel wrote.
            let n = unsafe {
                libc::read(
                    file.as_raw_fd(),
                    buf.as_mut_ptr().add(buf.len()).cast::<libc::c_void>(),
                    spare,
                )
            };
            if n >= 0 {
                unsafe { buf.set_len(buf.len() + n as usize) };
                return Ok(n as usize);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
    #[cfg(not(unix))]
    {
        file.read_to_end(buf)
    }
}

/// Files in flight (claimed by a worker, not yet delivered): enough to keep
/// every worker busy past a slow file, small enough to bound memory.
fn lookahead(workers: usize) -> usize {
    (workers * 16).max(16)
}

/// Files flow through `workers` jobs on a rayon pool that each claim the
/// next file in input order, so no worker waits for a slower one; results
/// are delivered in input order. A claim needs a ticket and delivering a
/// file returns one, so at most `lookahead` files are read but not yet
/// delivered, however uneven the files are.
pub struct Stream {
    total: usize,
    rx: Option<Receiver<(usize, FileResult)>>,
    tickets: Option<Sender<()>>,
    stop: Arc<AtomicBool>,
    done: Option<Receiver<()>>,
    reorder: BTreeMap<usize, FileResult>,
    next: usize,
    _pool: rayon::ThreadPool,
}

impl Stream {
    pub fn start(files: Vec<PathBuf>, params: ChunkParams, workers: usize) -> Result<Self, String> {
        let workers = workers.max(1);
        let ahead = lookahead(workers);
        let (tx, rx) = bounded::<(usize, FileResult)>(ahead);
        let (ticket_tx, ticket_rx) = bounded::<()>(ahead);
        for _ in 0..ahead {
            ticket_tx.send(()).map_err(|e| e.to_string())?;
        }
        let (done_tx, done_rx) = bounded::<()>(0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .thread_name(|i| format!("memsearch-chunk-{i}"))
            .build()
            .map_err(|e| e.to_string())?;
        let total = files.len();
        let shared: Arc<[PathBuf]> = files.into();
        let claimed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        for _ in 0..workers {
            let (files, claimed, stop) = (shared.clone(), claimed.clone(), stop.clone());
            let (tx, ticket_rx, done_tx) = (tx.clone(), ticket_rx.clone(), done_tx.clone());
            pool.spawn(move || {
                let _done = done_tx; // dropped when this job ends
                while ticket_rx.recv().is_ok() && !stop.load(Ordering::Relaxed) {
                    let i = claimed.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = files.get(i) else { return };
                    if tx.send((i, process_file_caught(path, params))).is_err() {
                        return; // consumer went away
                    }
                }
            });
        }
        Ok(Stream {
            total,
            rx: Some(rx),
            tickets: Some(ticket_tx),
            stop,
            done: Some(done_rx),
            reorder: BTreeMap::new(),
            next: 0,
            _pool: pool,
        })
    }

    /// The next file in input order, or None at the end.
    fn next_file(&mut self) -> Option<FileResult> {
        if self.next >= self.total {
            return None;
        }
        let rx = self.rx.as_ref()?;
        let result = loop {
            if let Some(r) = self.reorder.remove(&self.next) {
                break r;
            }
            let (i, r) = rx.recv().ok()?;
            self.reorder.insert(i, r);
        };
        self.next += 1;
        if let Some(t) = &self.tickets {
            let _ = t.send(());
        }
        Some(result)
    }

    /// Blocks until at least `min_chunks` chunks (or the end) are available;
    /// returns an empty vector once everything was delivered.
    pub fn next_batch(&mut self, min_chunks: usize, max_files: usize) -> Vec<FileResult> {
        let mut out = Vec::new();
        let mut chunks = 0usize;
        while chunks < min_chunks && out.len() < max_files {
            match self.next_file() {
                Some(r) => {
                    chunks += r.chunks.len().max(1);
                    out.push(r);
                }
                None => break,
            }
        }
        out
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Workers stop claiming, their sends fail once the receiver is gone;
        // wait until each has finished the file it holds.
        self.stop.store(true, Ordering::Relaxed);
        self.tickets = None;
        self.rx = None;
        if let Some(done) = self.done.take() {
            let _ = done.recv();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    #[test]
    fn read_sized_tolerates_a_wrong_size() {
        let path =
            std::env::temp_dir().join(format!("memsearch-read-sized-{}", std::process::id()));
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        fs::File::create(&path).unwrap().write_all(&data).unwrap();
        // Grown since fstat (hint too small), shrunk (too large), exact, empty hint.
        for hint in [0, 1, 9_999, 10_000, 10_001, 20_000] {
            let mut file = fs::File::open(&path).unwrap();
            assert_eq!(
                read_sized(&mut file, hint).unwrap(),
                data,
                "size hint {hint}"
            );
            file.rewind().unwrap();
        }
        fs::File::create(&path).unwrap();
        assert!(read_sized(&mut fs::File::open(&path).unwrap(), 0)
            .unwrap()
            .is_empty());
        fs::remove_file(&path).unwrap();
    }
}
