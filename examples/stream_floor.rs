//! The two costs no chunk stream can avoid, timed alone on one thread:
//! reading every file (the stream's own open, fstat, read, close) and the
//! stream's SHA-256 of every chunk's content (the id format fixes the hash).
//! `cargo run --release --example stream_floor -- DIR`
use std::time::Instant;

mod common;

fn main() {
    let dir = std::env::args().nth(1).expect("usage: stream_floor DIR");
    let files = common::markdown_files(&dir);
    let texts: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let total: usize = texts.iter().map(String::len).sum();
    let chunks: Vec<Vec<(usize, usize)>> = texts
        .iter()
        .map(|t| {
            _core::chunker::chunk_markdown(t, 1500, 2)
                .into_iter()
                .map(|c| c.content)
                .collect()
        })
        .collect();
    let (mut read_best, mut sha_best) = (f64::MAX, f64::MAX);
    for _ in 0..7 {
        let t = Instant::now();
        let mut n = 0;
        for f in &files {
            n += _core::stream::read_regular_file(f, 0).unwrap().1.len();
        }
        assert_eq!(n, total);
        read_best = read_best.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let mut acc = 0u8;
        for (text, spans) in texts.iter().zip(&chunks) {
            for &(s, e) in spans {
                acc ^= _core::hashing::sha256_head(&text.as_bytes()[s..e])
                    .as_str()
                    .as_bytes()[0];
            }
        }
        std::hint::black_box(acc);
        sha_best = sha_best.min(t.elapsed().as_secs_f64());
    }
    let mb = total as f64 / 1e6;
    println!("{} files, {mb:.1} MB", files.len());
    println!("read only:    {:.0} MB/s on one thread", mb / read_best);
    println!("SHA-256 only: {:.0} MB/s on one thread", mb / sha_best);
    println!(
        "read + SHA-256, both cores: {:.0} MB/s at most",
        2.0 * mb / (read_best + sha_best)
    );
}
