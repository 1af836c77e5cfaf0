//! Times the pure-Rust chunker on a directory of markdown (no Python):
//! `cargo run --release --example chunk_speed -- DIR`.
use std::time::Instant;

mod common;

fn main() {
    let dir = std::env::args().nth(1).expect("usage: chunk_speed DIR");
    let texts: Vec<String> = common::markdown_files(&dir)
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let total: usize = texts.iter().map(|t| t.len()).sum();
    for _ in 0..3 {
        let t = Instant::now();
        let n: usize = texts
            .iter()
            .map(|x| _core::chunker::chunk_markdown(x, 1500, 2).len())
            .sum();
        let dt = t.elapsed().as_secs_f64();
        println!("{n} chunks, {:.1} MB/s", total as f64 / dt / 1e6);
    }
}
