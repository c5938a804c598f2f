//! The workload under Rust's default allocator (glibc's malloc).
fn main() {
    hakmem_bench::main()
}
