//! The workload under hakmem.
#[global_allocator]
static GLOBAL: hakmem::HakMem = hakmem::HakMem;

fn main() {
    hakmem_bench::main()
}
