//! Directory scanning with the reference scanner's rules: files or
//! directories as roots, recursive walk without following directory symlinks
//! (so symlink loops cannot hang), hidden entries skipped, gitignore-style
//! ignore files discovered per directory inside each root (never above it),
//! `exclude` patterns relative to each root, de-duplication by resolved path.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

pub struct ScanOptions {
    pub extensions: Vec<String>,
    pub ignore_hidden: bool,
    pub ignore_files: Vec<String>,
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub mtime: f64,
    pub size: u64,
    /// Inode and status-change time: equal size and mtime do not prove the
    /// same file (two files swapped by renames keep theirs).
    pub ino: u64,
    pub ctime: f64,
}

/// A problem met while scanning, never fatal: the path it concerns (None
/// when it concerns none, e.g. an invalid pattern) and why, on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    pub path: Option<PathBuf>,
    pub reason: String,
}

impl ScanError {
    fn at(path: &Path, reason: impl Into<String>) -> Self {
        ScanError {
            path: Some(path.to_path_buf()),
            reason: reason.into(),
        }
    }

    /// `(path, reason)`, the path empty when there is none.
    pub fn into_parts(self) -> (PathBuf, String) {
        (self.path.unwrap_or_default(), self.reason)
    }
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}: {}", path.display(), self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

pub struct ScanOutcome {
    pub files: Vec<Found>,
    pub errors: Vec<ScanError>,
    /// Directories that could not be listed: files under them may exist,
    /// so nothing under them may be treated as deleted.
    pub incomplete: Vec<PathBuf>,
    /// Hidden entries skipped that hold markdown, each with its count of
    /// markdown files: a hidden file of a wanted extension (1), or a hidden
    /// directory (`.git` aside) with such files under it, counted within
    /// `HIDDEN_BUDGET` entries (a lower bound past it).
    pub hidden: Vec<(PathBuf, u64)>,
}

/// Entries of hidden directories the scan looks at, at most, to count the
/// markdown it skips there (a cache folder may hold millions).
const HIDDEN_BUDGET: usize = 20_000;

/// Checks `exclude` patterns up front, so a typo fails the scan instead of
/// silently skipping a whole root (which would look like deleted files).
pub fn validate_excludes(patterns: &[String]) -> Result<(), String> {
    let mut b = GitignoreBuilder::new("/");
    for pat in patterns {
        b.add_line(None, pat)
            .map_err(|e| format!("invalid exclude pattern {pat:?}: {e}"))?;
    }
    b.build()
        .map(|_| ())
        .map_err(|e| format!("invalid exclude patterns: {e}"))
}

/// An I/O error as one line, without Rust's "(os error N)" suffix.
pub fn io_message(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The inode and the status-change time (seconds) of `meta`; (0, 0.0) where
/// the platform has neither.
pub fn identity_of(meta: &fs::Metadata) -> (u64, f64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (
            meta.ino(),
            meta.ctime() as f64 + meta.ctime_nsec() as f64 * 1e-9,
        )
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        (0, 0.0)
    }
}

fn mtime_of(meta: &fs::Metadata) -> f64 {
    match meta.modified() {
        Ok(t) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        },
        Err(_) => 0.0,
    }
}

/// Python's `Path.suffix.lower()`: the last dot-suffix of the final
/// component, ignoring a leading dot.
fn suffix_lower(path: &Path) -> String {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy()) else {
        return String::new();
    };
    let trimmed = name.trim_start_matches('.');
    match trimmed.rfind('.') {
        Some(i) if i + 1 < trimmed.len() => trimmed[i..].to_lowercase(),
        _ => String::new(),
    }
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

struct RootMatcher {
    root: PathBuf,
    ignore_files: Vec<String>,
    by_dir: HashMap<PathBuf, Vec<Gitignore>>,
    exclude: Option<Gitignore>,
}

impl RootMatcher {
    fn new(root: &Path, opts: &ScanOptions) -> Result<Self, String> {
        let exclude = if opts.exclude.is_empty() {
            None
        } else {
            let mut b = GitignoreBuilder::new(root);
            for pat in &opts.exclude {
                b.add_line(None, pat)
                    .map_err(|e| format!("invalid exclude pattern {pat:?}: {e}"))?;
            }
            Some(
                b.build()
                    .map_err(|e| format!("invalid exclude patterns: {e}"))?,
            )
        };
        Ok(RootMatcher {
            root: root.to_path_buf(),
            ignore_files: opts.ignore_files.clone(),
            by_dir: HashMap::new(),
            exclude,
        })
    }

    fn enabled(&self) -> bool {
        self.exclude.is_some() || !self.ignore_files.is_empty()
    }

    fn load_directory(&mut self, dir: &Path, errors: &mut Vec<ScanError>) {
        if self.ignore_files.is_empty() || self.by_dir.contains_key(dir) {
            return;
        }
        let mut specs = Vec::new();
        for name in &self.ignore_files {
            let path = dir.join(name);
            if !path.is_file() {
                continue;
            }
            let text = match fs::read(&path) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => {
                    errors.push(ScanError::at(&path, io_message(&e)));
                    continue;
                }
            };
            let mut b = GitignoreBuilder::new(dir);
            for line in crate::pytext::py_splitlines(&text) {
                // An invalid pattern is skipped, like git does.
                let _ = b.add_line(None, line);
            }
            match b.build() {
                Ok(gi) => specs.push(gi),
                Err(e) => errors.push(ScanError::at(&path, e.to_string())),
            }
        }
        self.by_dir.insert(dir.to_path_buf(), specs);
    }

    /// Later directories override earlier ones; `exclude` overrides all.
    fn is_ignored(&self, path: &Path, is_dir: bool) -> bool {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return false;
        };
        let mut ignored = false;
        let mut dir = self.root.clone();
        let apply = |dir: &Path, ignored: &mut bool| {
            if let Some(specs) = self.by_dir.get(dir) {
                let candidate = path.strip_prefix(dir).unwrap_or(path);
                for spec in specs {
                    match spec.matched(candidate, is_dir) {
                        Match::Ignore(_) => *ignored = true,
                        Match::Whitelist(_) => *ignored = false,
                        Match::None => {}
                    }
                }
            }
        };
        if let Some(parent) = rel.parent() {
            for part in parent.components() {
                apply(&dir, &mut ignored);
                dir.push(part);
            }
        }
        apply(&dir, &mut ignored);
        if let Some(ex) = &self.exclude {
            match ex.matched(rel, is_dir) {
                Match::Ignore(_) => ignored = true,
                Match::Whitelist(_) => ignored = false,
                Match::None => {}
            }
        }
        ignored
    }
}

struct Collector<'a> {
    opts: &'a ScanOptions,
    seen: HashSet<PathBuf>,
    files: Vec<Found>,
    errors: Vec<ScanError>,
    incomplete: Vec<PathBuf>,
    hidden: Vec<(PathBuf, u64)>,
    hidden_budget: usize,
}

impl Collector<'_> {
    /// `root` is set for walked entries: their resolved path must stay
    /// inside it, so a symlink cannot pull in a file from elsewhere.
    fn maybe_add(&mut self, path: PathBuf, root: Option<&Path>) {
        let suffix = suffix_lower(&path);
        if !self.opts.extensions.contains(&suffix) {
            return;
        }
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                self.errors.push(ScanError::at(&path, io_message(&e)));
                return;
            }
        };
        if !meta.is_file() {
            // A FIFO, socket or device would block or fail the reader.
            if !meta.is_dir() {
                self.errors.push(ScanError::at(&path, "not a regular file"));
            }
            return;
        }
        let real = fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if let Some(root) = root {
            if !real.starts_with(root) {
                self.errors.push(ScanError::at(
                    &path,
                    format!("links outside {}", root.display()),
                ));
                return;
            }
        }
        if !self.seen.insert(real) {
            return;
        }
        let (ino, ctime) = identity_of(&meta);
        self.files.push(Found {
            path,
            mtime: mtime_of(&meta),
            size: meta.len(),
            ino,
            ctime,
        });
    }

    fn wanted(&self, path: &Path) -> bool {
        self.opts.extensions.contains(&suffix_lower(path))
    }

    /// A hidden entry the walk skips: counted when it holds markdown, so the
    /// run can say what it left out.
    fn note_hidden(&mut self, path: PathBuf, ft: Option<fs::FileType>, matcher: &RootMatcher) {
        let is_dir = ft.is_some_and(|t| t.is_dir());
        if (matcher.enabled() && matcher.is_ignored(&path, is_dir))
            || path.file_name() == Some(".git".as_ref())
        {
            return;
        }
        let found = if is_dir {
            self.count_markdown(&path)
        } else {
            u64::from(ft.is_some_and(|t| t.is_file()) && self.wanted(&path))
        };
        if found > 0 {
            self.hidden.push((path, found));
        }
    }

    /// Markdown files under `dir`, directory links not followed, within the budget.
    fn count_markdown(&mut self, dir: &Path) -> u64 {
        let mut found = 0;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if self.hidden_budget == 0 {
                    return found;
                }
                self.hidden_budget -= 1;
                match entry.file_type() {
                    Ok(t) if t.is_dir() => stack.push(entry.path()),
                    Ok(t) if t.is_file() && self.wanted(&entry.path()) => found += 1,
                    _ => {}
                }
            }
        }
        found
    }

    fn walk(&mut self, root: &Path) {
        let mut matcher = match RootMatcher::new(root, self.opts) {
            Ok(m) => m,
            Err(reason) => {
                self.errors.push(ScanError { path: None, reason });
                return;
            }
        };
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            matcher.load_directory(&dir, &mut self.errors);
            let entries = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) => {
                    self.errors.push(ScanError::at(&dir, io_message(&e)));
                    self.incomplete.push(dir.clone());
                    continue;
                }
            };
            let mut subdirs = Vec::new();
            let mut files = Vec::new();
            for entry in entries {
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        self.errors.push(ScanError::at(&dir, io_message(&e)));
                        self.incomplete.push(dir.clone());
                        continue;
                    }
                };
                let name = entry.file_name();
                if self.opts.ignore_hidden && is_hidden(&name) {
                    self.note_hidden(entry.path(), entry.file_type().ok(), &matcher);
                    continue;
                }
                let path = entry.path();
                let Ok(ft) = entry.file_type() else {
                    files.push(path);
                    continue;
                };
                if ft.is_dir() {
                    subdirs.push(path);
                } else if ft.is_symlink() {
                    // Directory symlinks are not followed (os.walk default).
                    if !path.is_dir() {
                        files.push(path);
                    }
                } else {
                    files.push(path);
                }
            }
            for path in files {
                if matcher.enabled() && matcher.is_ignored(&path, false) {
                    continue;
                }
                self.maybe_add(path, Some(root));
            }
            subdirs.retain(|d| !(matcher.enabled() && matcher.is_ignored(d, true)));
            subdirs.sort();
            stack.extend(subdirs.into_iter().rev());
        }
    }
}

/// Scans `roots` (already expanded by the caller). Missing roots and
/// unreadable entries are reported in `errors`, never fatal.
pub fn scan(roots: &[PathBuf], opts: &ScanOptions) -> ScanOutcome {
    let mut c = Collector {
        opts,
        seen: HashSet::new(),
        files: Vec::new(),
        errors: Vec::new(),
        incomplete: Vec::new(),
        hidden: Vec::new(),
        hidden_budget: HIDDEN_BUDGET,
    };
    for raw in roots {
        let root = match fs::canonicalize(raw) {
            Ok(r) => r,
            Err(e) => {
                c.errors.push(ScanError::at(raw, io_message(&e)));
                continue;
            }
        };
        if root.is_file() {
            c.maybe_add(root, None);
        } else if root.is_dir() {
            c.walk(&root);
        }
    }
    c.files.sort_by(|a, b| a.path.cmp(&b.path));
    ScanOutcome {
        files: c.files,
        errors: c.errors,
        incomplete: c.incomplete,
        hidden: c.hidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(exclude: &[&str]) -> ScanOptions {
        ScanOptions {
            extensions: vec![".md".into()],
            ignore_hidden: true,
            ignore_files: Vec::new(),
            exclude: exclude.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("memsearch-scan-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn error_pairs(outcome: ScanOutcome) -> Vec<(PathBuf, String)> {
        outcome
            .errors
            .into_iter()
            .map(ScanError::into_parts)
            .collect()
    }

    #[test]
    fn hidden_markdown_is_counted_not_indexed() {
        let dir = temp_dir("hidden");
        fs::create_dir_all(dir.join(".github/workflows")).unwrap();
        fs::create_dir_all(dir.join(".git/refs")).unwrap();
        fs::create_dir_all(dir.join(".cache")).unwrap();
        fs::write(dir.join(".github/CONTRIBUTING.md"), "# c\n").unwrap();
        fs::write(dir.join(".github/workflows/notes.md"), "# n\n").unwrap();
        fs::write(dir.join(".github/ci.yml"), "x: 1\n").unwrap();
        fs::write(dir.join(".git/refs/HEAD.md"), "# g\n").unwrap();
        fs::write(dir.join(".cache/blob.bin"), "x").unwrap();
        fs::write(dir.join(".draft.md"), "# d\n").unwrap();
        fs::write(dir.join("note.md"), "# hi\n").unwrap();
        let outcome = scan(std::slice::from_ref(&dir), &options(&[]));
        let root = fs::canonicalize(&dir).unwrap();
        assert_eq!(outcome.files.len(), 1);
        let mut hidden = outcome.hidden.clone();
        hidden.sort();
        assert_eq!(
            hidden,
            vec![(root.join(".draft.md"), 1), (root.join(".github"), 2)]
        );
        let excluded = scan(std::slice::from_ref(&dir), &options(&[".github/"]));
        assert_eq!(excluded.hidden, vec![(root.join(".draft.md"), 1)]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_root_is_a_path_and_reason_pair() {
        let dir = temp_dir("missing");
        let missing = dir.join("nope.md");
        let outcome = scan(std::slice::from_ref(&missing), &options(&[]));
        assert!(outcome.files.is_empty());
        let errors = error_pairs(outcome);
        assert_eq!(
            errors,
            vec![(missing.clone(), "No such file or directory".to_string())]
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_reported_not_read() {
        use std::os::unix::ffi::OsStrExt;
        let dir = temp_dir("fifo");
        let fifo = dir.join("pipe.md");
        let name = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        fs::write(dir.join("note.md"), "# hi\n").unwrap();
        let outcome = scan(std::slice::from_ref(&dir), &options(&[]));
        let root = fs::canonicalize(&dir).unwrap();
        assert_eq!(outcome.files.len(), 1);
        let errors = error_pairs(outcome);
        assert_eq!(
            errors,
            vec![(root.join("pipe.md"), "not a regular file".to_string())]
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_error_without_a_path_has_an_empty_one() {
        let e = ScanError {
            path: None,
            reason: "invalid exclude patterns: x".into(),
        };
        assert_eq!(e.to_string(), "invalid exclude patterns: x");
        assert_eq!(
            e.into_parts(),
            (PathBuf::new(), "invalid exclude patterns: x".to_string())
        );
        let e = ScanError::at(Path::new("/a/b.md"), "denied");
        assert_eq!(e.to_string(), "/a/b.md: denied");
    }
}
