//! The workload under the mimalloc crate.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    hakmem_bench::main()
}
