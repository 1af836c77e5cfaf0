//! `memsearch_fast._core`: the CPU-bound, pure part of memsearch-fast —
//! scanning, chunking and hashing, and the int8 span search of a long-lived
//! process — behind a small typed surface.

pub mod answer;
pub mod b64;
pub mod chunker;
pub mod hashing;
pub mod pytext;
pub mod scanner;
pub mod spans;
pub mod stream;
pub mod vectors;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

// Chunks are allocated on worker threads and freed on the Python thread;
// mimalloc handles that cross-thread traffic far better than the system
// allocator (pydantic-core makes the same choice).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use pyo3::exceptions::{PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

/// A markdown file found by `scan_paths`.
#[pyclass(frozen, module = "memsearch_fast._core")]
struct ScannedFile {
    path: PathBuf,
    #[pyo3(get)]
    mtime: f64,
    #[pyo3(get)]
    size: u64,
    #[pyo3(get)]
    ino: u64,
    #[pyo3(get)]
    ctime: f64,
}

#[pymethods]
impl ScannedFile {
    #[new]
    #[pyo3(signature = (path, mtime, size, ino = 0, ctime = 0.0))]
    fn new(path: PathBuf, mtime: f64, size: u64, ino: u64, ctime: f64) -> Self {
        ScannedFile {
            path,
            mtime,
            size,
            ino,
            ctime,
        }
    }

    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.path.as_os_str().into_pyobject(py)?.into_any())
    }

    fn __fspath__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.path(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "ScannedFile(path={:?}, mtime={}, size={})",
            self.path.display().to_string(),
            self.mtime,
            self.size
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match other.downcast::<ScannedFile>() {
            Ok(o) => {
                let o = o.get();
                o.path == self.path
                    && o.mtime == self.mtime
                    && o.size == self.size
                    && o.ino == self.ino
                    && o.ctime == self.ctime
            }
            Err(_) => false,
        }
    }
}

/// One chunk of a markdown document; lines are 1-based and inclusive.
///
/// Holds its document and source by reference (shared with the other chunks
/// of the file) and makes Python strings only when they are read, so a chunk
/// whose id is all that is needed (an unchanged file) never copies its text.
#[pyclass(frozen, module = "memsearch_fast._core")]
struct Chunk {
    text: Arc<String>,
    source: Arc<str>,
    raw: chunker::RawChunk,
}

#[pymethods]
impl Chunk {
    #[getter]
    fn content(&self) -> &str {
        self.raw.content(&self.text)
    }

    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    #[getter]
    fn heading(&self) -> &str {
        self.raw.heading(&self.text)
    }

    #[getter]
    fn heading_level(&self) -> u8 {
        self.raw.heading_level
    }

    #[getter]
    fn start_line(&self) -> usize {
        self.raw.start_line
    }

    #[getter]
    fn end_line(&self) -> usize {
        self.raw.end_line
    }

    #[getter]
    fn content_hash(&self) -> &str {
        self.raw.content_hash.as_str()
    }

    /// The composite id under which this chunk is stored for `model`.
    fn chunk_id(&self, model: &str) -> String {
        let r = &self.raw;
        hashing::chunk_id(
            &self.source,
            r.start_line as i64,
            r.end_line as i64,
            r.content_hash.as_str(),
            model,
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> PyObject {
        let py = other.py();
        match other.downcast::<Chunk>() {
            Ok(o) => {
                let (o, a, b) = (o.get(), &self.raw, &o.get().raw);
                let equal = self.source == o.source
                    && self.content() == o.content()
                    && self.heading() == o.heading()
                    && (a.heading_level, a.start_line, a.end_line)
                        == (b.heading_level, b.start_line, b.end_line)
                    && a.content_hash == b.content_hash;
                equal
                    .into_pyobject(py)
                    .map_or_else(|_| py.None(), |b| b.to_owned().into_any().unbind())
            }
            Err(_) => py.NotImplemented(),
        }
    }

    fn __repr__(&self) -> String {
        let r = &self.raw;
        format!(
            "Chunk(source={:?}, heading={:?}, heading_level={}, start_line={}, end_line={}, content_hash={:?}, content={} chars)",
            &*self.source,
            self.heading(),
            r.heading_level,
            r.start_line,
            r.end_line,
            r.content_hash.as_str(),
            self.content().chars().count()
        )
    }
}

/// The chunks of one file plus what change detection needs.
#[pyclass(frozen, get_all, module = "memsearch_fast._core")]
struct FileChunks {
    path: String,
    size: u64,
    mtime: f64,
    ino: u64,
    ctime: f64,
    fingerprint: String,
    chunks: Py<PyList>,
    error: Option<String>,
    invalid_utf8: bool,
}

#[pymethods]
impl FileChunks {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "FileChunks(path={:?}, size={}, chunks={}, error={:?}, invalid_utf8={})",
            self.path,
            self.size,
            self.chunks.bind(py).len(),
            self.error,
            self.invalid_utf8
        )
    }
}

/// Iterator of batches (lists of `FileChunks`) produced in parallel.
#[pyclass(module = "memsearch_fast._core")]
struct ChunkStream {
    stream: stream::Stream,
    batch_chunks: usize,
    max_files: usize,
}

#[pymethods]
impl ChunkStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(mut slf: PyRefMut<'_, Self>, py: Python<'_>) -> PyResult<Py<PyList>> {
        let (min_chunks, max_files) = (slf.batch_chunks, slf.max_files);
        let stream = &mut slf.stream;
        let batch = py.allow_threads(|| stream.next_batch(min_chunks, max_files));
        if batch.is_empty() {
            return Err(PyStopIteration::new_err(()));
        }
        let mut items = Vec::with_capacity(batch.len());
        for r in batch {
            let source: Arc<str> = Arc::from(r.source.as_str());
            let chunks = PyList::new(
                py,
                r.chunks
                    .into_iter()
                    .map(|raw| {
                        Py::new(
                            py,
                            Chunk {
                                text: r.text.clone(),
                                source: source.clone(),
                                raw,
                            },
                        )
                    })
                    .collect::<PyResult<Vec<_>>>()?,
            )?;
            items.push(Py::new(
                py,
                FileChunks {
                    path: r.source,
                    size: r.size,
                    mtime: r.mtime,
                    ino: r.ino,
                    ctime: r.ctime,
                    fingerprint: r.fingerprint,
                    chunks: chunks.unbind(),
                    error: r.error,
                    invalid_utf8: r.invalid_utf8,
                },
            )?);
        }
        Ok(PyList::new(py, items)?.unbind())
    }
}

fn check_max_chunk_size(max_chunk_size: i64) -> PyResult<usize> {
    if max_chunk_size < 1 {
        return Err(PyValueError::new_err("max_chunk_size must be >= 1"));
    }
    Ok(max_chunk_size as usize)
}

/// What `scan_paths` returns: files, `(path, reason)` errors (path "" when
/// an error concerns no path), and incomplete directories.
type ScanReturn = (
    Vec<Py<ScannedFile>>,
    Vec<(OsString, String)>,
    Vec<PathBuf>,
    Vec<(PathBuf, u64)>,
);

/// Scans roots; returns `(files, errors, incomplete directories, hidden
/// entries skipped that hold markdown with their markdown files)` — each
/// error a `(path, reason)` pair, the reason one line; files under an
/// incomplete directory may exist.
#[pyfunction]
#[pyo3(signature = (paths, extensions, ignore_hidden, ignore_files, exclude))]
fn scan_paths(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    extensions: Vec<String>,
    ignore_hidden: bool,
    ignore_files: Vec<String>,
    exclude: Vec<String>,
) -> PyResult<ScanReturn> {
    scanner::validate_excludes(&exclude).map_err(PyValueError::new_err)?;
    let opts = scanner::ScanOptions {
        extensions,
        ignore_hidden,
        ignore_files,
        exclude,
    };
    let outcome = py.allow_threads(|| scanner::scan(&paths, &opts));
    let files = outcome
        .files
        .into_iter()
        .map(|f| {
            Py::new(
                py,
                ScannedFile {
                    path: f.path,
                    mtime: f.mtime,
                    size: f.size,
                    ino: f.ino,
                    ctime: f.ctime,
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    let errors = outcome
        .errors
        .into_iter()
        .map(|e| {
            let (path, reason) = e.into_parts();
            (path.into_os_string(), reason)
        })
        .collect();
    Ok((files, errors, outcome.incomplete, outcome.hidden))
}

/// Splits markdown text into chunks (see `memsearch_fast.chunk_markdown`).
#[pyfunction]
#[pyo3(signature = (text, source = "", *, max_chunk_size, overlap_lines))]
fn chunk_markdown(
    py: Python<'_>,
    text: &str,
    source: &str,
    max_chunk_size: i64,
    overlap_lines: i64,
) -> PyResult<Vec<Chunk>> {
    let max = check_max_chunk_size(max_chunk_size)?;
    let text = Arc::new(text.to_owned());
    let raw = py.allow_threads(|| chunker::chunk_markdown(&text, max, overlap_lines));
    let source: Arc<str> = Arc::from(source);
    Ok(raw
        .into_iter()
        .map(|raw| Chunk {
            text: text.clone(),
            source: source.clone(),
            raw,
        })
        .collect())
}

/// Reads, chunks and hashes `files` on `workers` threads; see `chunk_files`.
#[pyfunction]
#[pyo3(signature = (files, *, max_chunk_size, overlap_lines, workers, batch_chunks = 2048, max_files = 4096, max_file_bytes = 0))]
fn chunk_files(
    files: Vec<PathBuf>,
    max_chunk_size: i64,
    overlap_lines: i64,
    workers: usize,
    batch_chunks: usize,
    max_files: usize,
    max_file_bytes: u64,
) -> PyResult<ChunkStream> {
    let params = stream::ChunkParams {
        max_chunk_size: check_max_chunk_size(max_chunk_size)?,
        overlap_lines,
        max_file_bytes,
    };
    let stream = stream::Stream::start(files, params, workers).map_err(PyValueError::new_err)?;
    Ok(ChunkStream {
        stream,
        batch_chunks: batch_chunks.max(1),
        max_files: max_files.max(1),
    })
}

/// `sha256("markdown:{source}:{start}:{end}:{content_hash}:{model}")[:16]`.
#[pyfunction]
fn compute_chunk_id(
    source: &str,
    start_line: i64,
    end_line: i64,
    content_hash: &str,
    model: &str,
) -> String {
    hashing::chunk_id(source, start_line, end_line, content_hash, model)
}

/// Base64 rows of `row_len` characters each, joined in `text`, as their bytes
/// (the vectors of an OpenAI-compatible server), decoded without the GIL.
#[pyfunction]
fn decode_base64_rows<'py>(
    py: Python<'py>,
    text: &str,
    row_len: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let raw = py
        .allow_threads(|| b64::decode_rows(text.as_bytes(), row_len))
        .map_err(PyValueError::new_err)?;
    Ok(PyBytes::new(py, &raw))
}

/// The packed records of many manifest entries in one buffer: each item is the
/// records' bytes or their base64 text as a manifest file holds it. An item that
/// does not decode, or is not a whole number of `record`-byte records, adds
/// nothing. One call where a loop over 97,000 entries took 0.17 s at 1 GB.
#[pyfunction]
fn join_records<'py>(
    py: Python<'py>,
    items: Vec<Bound<'py, PyAny>>,
    record: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    if record == 0 {
        return Err(PyValueError::new_err("record must be positive"));
    }
    let size = |item: &Bound<'py, PyAny>| match item.downcast::<PyString>() {
        Ok(text) => text.len().map(|n| n / 4 * 3).unwrap_or(0),
        Err(_) => item
            .downcast::<PyBytes>()
            .map_or(0, |raw| raw.as_bytes().len()),
    };
    let mut out = Vec::with_capacity(items.iter().map(size).sum());
    for item in &items {
        let at = out.len();
        if let Ok(text) = item.downcast::<PyString>() {
            let whole = b64::decode_into(text.to_str()?.as_bytes(), &mut out).is_ok()
                && (out.len() - at).is_multiple_of(record);
            if !whole {
                out.truncate(at);
            }
        } else if let Ok(raw) = item.downcast::<PyBytes>() {
            let raw = raw.as_bytes();
            if raw.len().is_multiple_of(record) {
                out.extend_from_slice(raw);
            }
        } else {
            return Err(PyTypeError::new_err(
                "records are bytes or their base64 text",
            ));
        }
    }
    Ok(PyBytes::new(py, &out))
}

/// The vectors of an embeddings answer of OpenAI's shape with `n` base64 rows,
/// as their bytes, read without the GIL; None for any other answer (the caller
/// reads it as JSON).
#[pyfunction]
fn base64_answer<'py>(py: Python<'py>, body: &[u8], n: usize) -> Option<Bound<'py, PyBytes>> {
    let raw = py.allow_threads(|| answer::base64_vectors(body, n))?;
    Some(PyBytes::new(py, &raw))
}

/// First 16 hex digits of the SHA-256 of `text` (UTF-8).
#[pyfunction]
fn content_hash(text: &str) -> String {
    hashing::sha256_hex16(text.as_bytes())
}

/// The spans of each chunk `(content, heading, start_line)`, cut in parallel
/// without the GIL: `(index, start_line, end_line, text, content_hash)` each.
#[pyfunction]
#[pyo3(signature = (chunks, *, budget, min_chunk, min_sentence, first))]
fn cut_spans(
    py: Python<'_>,
    chunks: Vec<(String, String, i64)>,
    budget: i64,
    min_chunk: usize,
    min_sentence: usize,
    first: i64,
) -> Vec<Vec<spans::Span>> {
    use rayon::prelude::*;
    let rules = spans::Rules {
        budget: budget.max(0) as usize,
        min_chunk,
        min_sentence,
        first,
    };
    py.allow_threads(|| {
        chunks
            .par_iter()
            .map(|(content, heading, start)| spans::cut(content, heading, *start, rules))
            .collect()
    })
}

/// What [`cut_spans_columns`] gives: per chunk its span count; per span its
/// first and last line and UTF-8 size (little-endian `i32` each), text and hash.
type SpanColumns<'py> = (
    Vec<usize>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Vec<String>,
    Vec<String>,
);

/// [`cut_spans`] as columns, a chunk's spans in a run (their index is `first`
/// on): the index run keeps a chunk's spans as arrays, and a tuple of five
/// objects a span cost it more than the cutting.
#[pyfunction]
#[pyo3(signature = (chunks, *, budget, min_chunk, min_sentence, first))]
fn cut_spans_columns<'py>(
    py: Python<'py>,
    chunks: Vec<(String, String, i64)>,
    budget: i64,
    min_chunk: usize,
    min_sentence: usize,
    first: i64,
) -> SpanColumns<'py> {
    let cut = cut_spans(py, chunks, budget, min_chunk, min_sentence, first);
    let counts: Vec<usize> = cut.iter().map(Vec::len).collect();
    let total: usize = counts.iter().sum();
    let (mut starts, mut ends, mut sizes) = (
        Vec::with_capacity(total * 4),
        Vec::with_capacity(total * 4),
        Vec::with_capacity(total * 4),
    );
    let (mut texts, mut hashes) = (Vec::with_capacity(total), Vec::with_capacity(total));
    for (_, a, b, text, hash) in cut.into_iter().flatten() {
        starts.extend_from_slice(&(a as i32).to_le_bytes());
        ends.extend_from_slice(&(b as i32).to_le_bytes());
        sizes.extend_from_slice(&(text.len() as i32).to_le_bytes());
        texts.push(text);
        hashes.push(hash);
    }
    (
        counts,
        PyBytes::new(py, &starts),
        PyBytes::new(py, &ends),
        PyBytes::new(py, &sizes),
        texts,
        hashes,
    )
}

/// Heading level of each line (0 = none), fence-aware as the chunker is.
#[pyfunction]
fn heading_levels(lines: Vec<String>) -> Vec<u8> {
    chunker::heading_levels(lines.iter().map(String::as_str))
}

/// HTML comments removed, runs of 3+ newlines collapsed, stripped.
#[pyfunction]
fn clean_content_for_embedding(text: &str) -> String {
    pytext::clean_for_embedding(text)
}

fn vector_rows<'a>(
    codes: &'a [u8],
    dim: usize,
    scales: &'a [u8],
    offsets: &'a [u8],
    query: &[f32],
) -> PyResult<(vectors::Rows<'a>, vectors::Query)> {
    if query.len() != dim {
        return Err(PyValueError::new_err(format!(
            "a query of {} dimensions for rows of {dim}",
            query.len()
        )));
    }
    let rows = vectors::Rows::new(codes, dim, scales, offsets).map_err(PyValueError::new_err)?;
    Ok((rows, vectors::Query::new(query)))
}

/// The `k` groups whose best row scores highest for `query`: (group, row,
/// score), best first. Rows are int8 `codes` (rows × `dim`) with a float32
/// scale each; group `g` holds rows `offsets[g]..offsets[g + 1]` (u32).
/// With `signs` (each row's sign bits, `(dim + 7) / 8` bytes, little bit order)
/// and a `shortlist`, only the `shortlist` groups nearest by sign bits are
/// scored with the codes.
#[pyfunction]
#[pyo3(signature = (codes, dim, scales, offsets, query, k, signs = None, shortlist = 0))]
#[allow(clippy::too_many_arguments)]
fn best_groups(
    py: Python<'_>,
    codes: &[u8],
    dim: usize,
    scales: &[u8],
    offsets: &[u8],
    query: Vec<f32>,
    k: usize,
    signs: Option<&[u8]>,
    shortlist: usize,
) -> PyResult<Vec<(u32, u32, f32)>> {
    let (rows, q) = vector_rows(codes, dim, scales, offsets, &query)?;
    match signs {
        Some(bits) if shortlist > 0 => {
            let signs = vectors::Signs::new(bits, &rows).map_err(PyValueError::new_err)?;
            Ok(py
                .allow_threads(|| vectors::top_groups_shortlisted(&rows, &signs, &q, k, shortlist)))
        }
        _ => Ok(py.allow_threads(|| vectors::top_groups(&rows, &q, k))),
    }
}

/// The best row of each of `groups` (those that have rows), as `best_groups` scores them.
#[pyfunction]
fn best_in_groups(
    codes: &[u8],
    dim: usize,
    scales: &[u8],
    offsets: &[u8],
    query: Vec<f32>,
    groups: Vec<u32>,
) -> PyResult<Vec<(u32, u32, f32)>> {
    let (rows, q) = vector_rows(codes, dim, scales, offsets, &query)?;
    Ok(vectors::best_in(&rows, &q, &groups))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CHUNK_AMPLIFY", chunker::AMPLIFY)?;
    m.add("CHUNK_SLACK_CHUNKS", chunker::SLACK_CHUNKS)?;
    m.add_class::<ScannedFile>()?;
    m.add_class::<Chunk>()?;
    m.add_class::<FileChunks>()?;
    m.add_class::<ChunkStream>()?;
    m.add_function(wrap_pyfunction!(scan_paths, m)?)?;
    m.add_function(wrap_pyfunction!(chunk_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(chunk_files, m)?)?;
    m.add_function(wrap_pyfunction!(compute_chunk_id, m)?)?;
    m.add_function(wrap_pyfunction!(content_hash, m)?)?;
    m.add_function(wrap_pyfunction!(cut_spans, m)?)?;
    m.add_function(wrap_pyfunction!(cut_spans_columns, m)?)?;
    m.add_function(wrap_pyfunction!(decode_base64_rows, m)?)?;
    m.add_function(wrap_pyfunction!(join_records, m)?)?;
    m.add_function(wrap_pyfunction!(base64_answer, m)?)?;
    m.add_function(wrap_pyfunction!(clean_content_for_embedding, m)?)?;
    m.add_function(wrap_pyfunction!(heading_levels, m)?)?;
    m.add_function(wrap_pyfunction!(best_groups, m)?)?;
    m.add_function(wrap_pyfunction!(best_in_groups, m)?)?;
    Ok(())
}
