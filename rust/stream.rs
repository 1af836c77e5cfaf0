//! Parallel read → decode → chunk → hash of many files, streamed in bounded
//! batches so a multi-gigabyte corpus is never held in memory at once.
//!
//! A producer thread owns a rayon pool of `workers` threads and processes
//! files in windows; results flow through a bounded channel, so the producer
//! runs at most a couple of windows ahead of the consumer (backpressure).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver};
use rayon::prelude::*;

use crate::chunker::{chunk_markdown, RawChunk};
use crate::hashing::fingerprint;

/// Everything learned about one file.
pub struct FileResult {
    pub path: PathBuf,
    pub source: String,
    pub size: u64,
    pub mtime: f64,
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
}

pub fn process_file(path: PathBuf, params: ChunkParams) -> FileResult {
    let (source, bad_name) = match path.to_str() {
        Some(s) => (s.to_string(), false),
        None => (path.to_string_lossy().into_owned(), true),
    };
    let mut result = FileResult {
        path,
        source,
        size: 0,
        mtime: 0.0,
        fingerprint: String::new(),
        text: Arc::default(),
        chunks: Vec::new(),
        error: None,
        invalid_utf8: false,
    };
    if bad_name {
        // Two such names could map to one lossy source string and collide.
        result.error = Some("file name is not valid UTF-8".into());
        return result;
    }
    let (meta, bytes) = match read_regular_file(&result.path) {
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
    result.size = bytes.len() as u64;
    result.fingerprint = fingerprint(&bytes);
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            result.invalid_utf8 = true;
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    };
    result.chunks = chunk_markdown(&text, params.max_chunk_size, params.overlap_lines);
    result.text = Arc::new(text);
    result
}

/// Opens `path` once and reads it if it is a regular file. The open never
/// blocks (a FIFO named `*.md` would block a plain open forever), and the
/// type check and the read see the same file.
fn read_regular_file(path: &Path) -> Result<(fs::Metadata, Vec<u8>), String> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let mut file = options.open(path).map_err(|e| crate::scanner::io_message(&e))?;
    let meta = file.metadata().map_err(|e| crate::scanner::io_message(&e))?;
    if !meta.is_file() {
        return Err(if meta.is_dir() { "is a directory".into() } else { "not a regular file".into() });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    file.read_to_end(&mut bytes).map_err(|e| crate::scanner::io_message(&e))?;
    Ok((meta, bytes))
}

/// Files per parallel window: enough to keep every worker busy, small enough
/// to bound memory.
fn window_size(workers: usize) -> usize {
    (workers * 16).max(16)
}

pub struct Stream {
    rx: Option<Receiver<FileResult>>,
    handle: Option<JoinHandle<()>>,
}

impl Stream {
    pub fn start(files: Vec<PathBuf>, params: ChunkParams, workers: usize) -> Result<Self, String> {
        let workers = workers.max(1);
        let window = window_size(workers);
        let (tx, rx) = bounded::<FileResult>(window * 2);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .thread_name(|i| format!("memsearch-chunk-{i}"))
            .build()
            .map_err(|e| e.to_string())?;
        let handle = std::thread::Builder::new()
            .name("memsearch-chunk-producer".into())
            .spawn(move || {
                let mut files = files.into_iter().peekable();
                while files.peek().is_some() {
                    let batch: Vec<PathBuf> = files.by_ref().take(window).collect();
                    let results: Vec<FileResult> =
                        pool.install(|| batch.into_par_iter().map(|p| process_file(p, params)).collect());
                    for r in results {
                        if tx.send(r).is_err() {
                            return; // consumer went away
                        }
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Stream { rx: Some(rx), handle: Some(handle) })
    }

    /// Blocks until at least `min_chunks` chunks (or the end) are available;
    /// returns an empty vector once everything was delivered.
    pub fn next_batch(&mut self, min_chunks: usize, max_files: usize) -> Vec<FileResult> {
        let Some(rx) = &self.rx else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut chunks = 0usize;
        while chunks < min_chunks && out.len() < max_files {
            match rx.recv() {
                Ok(r) => {
                    chunks += r.chunks.len().max(1);
                    out.push(r);
                }
                Err(_) => {
                    self.rx = None;
                    break;
                }
            }
        }
        out
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Dropping the receiver makes the producer's next send fail.
        self.rx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
