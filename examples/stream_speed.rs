//! Times the parallel `chunk_files` stream without Python:
//! `cargo run --release --example stream_speed -- DIR WORKERS`.
use std::time::Instant;

mod common;

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: stream_speed DIR WORKERS");
    let workers: usize = std::env::args().nth(2).map_or(2, |w| w.parse().unwrap());
    let files = common::markdown_files(&dir);
    let total: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    for _ in 0..rounds {
        let t = Instant::now();
        let params = _core::stream::ChunkParams {
            max_chunk_size: 1500,
            overlap_lines: 2,
            max_file_bytes: 0,
        };
        let mut s = _core::stream::Stream::start(files.clone(), params, workers).unwrap();
        let mut n = 0;
        loop {
            let b = s.next_batch(2048, 4096);
            if b.is_empty() {
                break;
            }
            n += b.iter().map(|r| r.chunks.len()).sum::<usize>();
        }
        println!(
            "{n} chunks, {:.1} MB/s",
            total as f64 / t.elapsed().as_secs_f64() / 1e6
        );
    }
}
