//! Times the pure-Rust chunker on a directory of markdown (no Python):
//! `cargo run --release --example chunk_speed -- DIR`.
use std::time::Instant;

fn main() {
    let dir = std::env::args().nth(1).expect("usage: chunk_speed DIR");
    let mut texts = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                texts.push(std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let total: usize = texts.iter().map(|t| t.len()).sum();
    for _ in 0..3 {
        let t = Instant::now();
        let n: usize = texts.iter().map(|x| _core::chunker::chunk_markdown(x, 1500, 2).len()).sum();
        let dt = t.elapsed().as_secs_f64();
        println!("{n} chunks, {:.1} MB/s", total as f64 / dt / 1e6);
    }
}
