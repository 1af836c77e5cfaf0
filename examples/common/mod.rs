//! Shared by the timing examples: the markdown files under a directory,
//! found by the crate's own scanner, in its (sorted) order.
use std::path::PathBuf;

pub fn markdown_files(dir: &str) -> Vec<PathBuf> {
    let opts = _core::scanner::ScanOptions {
        extensions: vec![".md".into(), ".markdown".into()],
        ignore_hidden: true,
        ignore_files: Vec::new(),
        exclude: Vec::new(),
    };
    _core::scanner::scan(&[PathBuf::from(dir)], &opts)
        .files
        .into_iter()
        .map(|f| f.path)
        .collect()
}
