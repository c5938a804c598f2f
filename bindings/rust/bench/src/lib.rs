//! The workload: what a Rust service does to its allocator. Each thread
//! keeps a map of string keys to byte vectors and strings, replaces and
//! removes entries in rounds (sizes 8 B to 4 KiB, a few of 64 KiB), builds
//! and drops formatted strings, and hands a share of its values to the next
//! thread, which frees them.
use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

pub const THREADS: usize = 4;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn size(&mut self) -> usize {
        let r = self.next();
        if r % 64 == 0 {
            65536
        } else {
            8 << (r >> 8) % 10
        }
    }
}

/// Runs `ops` operations on each thread; returns operations per second.
pub fn run(ops: usize) -> f64 {
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..THREADS {
        let (tx, rx) = mpsc::channel::<Vec<Vec<u8>>>();
        senders.push(tx);
        receivers.push(rx);
    }
    senders.rotate_left(1);
    let start = Instant::now();
    let handles: Vec<_> = senders
        .into_iter()
        .zip(receivers)
        .enumerate()
        .map(|(t, (tx, rx))| {
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1));
                let mut map: HashMap<String, (Vec<u8>, String)> = HashMap::new();
                let mut outgoing = Vec::new();
                let mut checksum = 0u64;
                for i in 0..ops {
                    let k = format!("key-{}", rng.next() % 4096);
                    match rng.next() % 4 {
                        0 => {
                            map.remove(&k);
                        }
                        1 => {
                            let v = vec![i as u8; rng.size()];
                            outgoing.push(v);
                            if outgoing.len() == 64 {
                                let _ = tx.send(std::mem::take(&mut outgoing));
                            }
                        }
                        _ => {
                            let v = vec![t as u8; rng.size()];
                            let s = format!("{}:{}:{}", k, i, v.len());
                            map.insert(k, (v, s));
                        }
                    }
                    while let Ok(batch) = rx.try_recv() {
                        checksum += batch.iter().map(|v| v.len() as u64).sum::<u64>();
                    }
                }
                drop(tx);
                checksum += rx.iter().flatten().map(|v| v.len() as u64).sum::<u64>();
                checksum + map.values().map(|(v, s)| (v.len() + s.len()) as u64).sum::<u64>()
            })
        })
        .collect();
    let checksum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(checksum > 0);
    (ops * THREADS) as f64 / start.elapsed().as_secs_f64()
}

/// The peak resident set of this process, KiB (VmHWM).
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// main() of the per-allocator programs: one run, "ops_per_s peak_rss_kib".
pub fn main() {
    let ops = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let rate = run(ops);
    println!("{:.0} {}", rate, peak_rss_kib());
}
