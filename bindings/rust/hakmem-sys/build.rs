//! Builds hakmem from the C sources of the repository this crate sits in
//! (../../../src): every src/*.c and src/os/linux.c, the list the Makefile
//! takes too, with malloc left to libc (HAK_OVERRIDE=0): Rust's allocations
//! go to hakmem through the hak_* API, C libraries in the same program keep
//! theirs.
use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../../..").canonicalize().expect("hakmem's repository root");
    let src = root.join("src");
    let mut sources: Vec<PathBuf> = fs::read_dir(&src)
        .expect("hakmem's src/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map_or(false, |x| x == "c"))
        .collect();
    sources.push(src.join("os/linux.c"));
    sources.sort();

    let mut build = cc::Build::new();
    build
        .files(&sources)
        .include(root.join("include"))
        .include(&src)
        .define("_GNU_SOURCE", None)
        .define("HAK_OVERRIDE", "0")
        .define("HAK_STAT", "1")
        .flag("-std=c11")
        .flag("-fvisibility=hidden")
        .flag("-ftls-model=initial-exec")
        .opt_level(2)
        .warnings(false);
    build.compile("hakmem");
    println!("cargo:rustc-link-lib=pthread");
    println!("cargo:include={}", root.join("include").display());
    rerun_if_changed(&root.join("include"));
    rerun_if_changed(&src);
}

fn rerun_if_changed(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rerun_if_changed(&path);
        } else {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
