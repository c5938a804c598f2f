//! target/release/hakmem-bench [ROUNDS] [OPS], after cargo build --release
//! in bindings/rust/bench (which builds the three programs it runs): runs the workload
//! (src/lib.rs) under the system allocator, hakmem and mimalloc, one
//! program each, interleaved for ROUNDS rounds (default 7), and prints the
//! median throughput and peak RSS of each, relative to the fastest.
use std::path::PathBuf;
use std::process::Command;

const ALLOCATORS: [&str; 3] = ["system", "hakmem", "mimalloc"];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let ops: String = args.next().unwrap_or_else(|| "1000000".into());
    let dir: PathBuf = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let mut rates = vec![Vec::new(); ALLOCATORS.len()];
    let mut rss = vec![Vec::new(); ALLOCATORS.len()];
    for _ in 0..rounds {
        for (a, name) in ALLOCATORS.iter().enumerate() {
            let out = Command::new(dir.join(format!("bench-{}", name)))
                .arg(&ops)
                .output()
                .unwrap_or_else(|e| panic!("bench-{}: {} (build with cargo build --release in bindings/rust/bench)", name, e));
            assert!(out.status.success(), "bench-{} failed: {}", name, String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8_lossy(&out.stdout);
            let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().unwrap());
            rates[a].push(fields.next().unwrap());
            rss[a].push(fields.next().unwrap() / 1024.0);
        }
    }
    let rates: Vec<f64> = rates.into_iter().map(median).collect();
    let rss: Vec<f64> = rss.into_iter().map(median).collect();
    let best = rates.iter().cloned().fold(0.0, f64::max);
    println!("workload: {} threads x {} operations, median of {} interleaved rounds", hakmem_bench::THREADS, ops, rounds);
    println!("{:<10} {:>14} {:>9} {:>14}", "allocator", "ops/s", "vs best", "peak RSS MiB");
    for (a, name) in ALLOCATORS.iter().enumerate() {
        println!("{:<10} {:>14.0} {:>8.2}x {:>14.1}", name, rates[a], rates[a] / best, rss[a]);
    }
}
