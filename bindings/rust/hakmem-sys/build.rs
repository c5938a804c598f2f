//! Builds hakmem from the C sources in this crate's `c/` (in a clone, links
//! to the repository's `src/` and `include/`; in a packaged crate, copies):
//! every `src/*/*.c`, the list the Makefile takes too,
//! with malloc left to libc (HAK_OVERRIDE=0): Rust's allocations go to
//! hakmem through the hak_* API, C libraries in the same program keep
//! theirs.
//!
//! The C compiler is called directly (`CC_<target>`, `CC`, else `cc`; `AR`
//! likewise, else `ar`), so the crate builds with nothing but the Rust
//! toolchain and a C compiler: no build dependency, no crate cache.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::{env, fs};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let c = manifest.join("c");
    let src = c.join("src");
    let include = c.join("include");

    let read = |dir: &Path| -> Vec<PathBuf> {
        fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("hakmem's C sources in {}: {}", dir.display(), e))
            .map(|e| e.unwrap().path())
            .collect()
    };
    let mut sources: Vec<PathBuf> = read(&src)
        .into_iter()
        .filter(|p| p.is_dir())
        .flat_map(|dir| read(&dir))
        .filter(|p| p.extension().map_or(false, |x| x == "c"))
        .collect();
    sources.sort();

    let cc = tool("CC", "cc");
    let mut flags: Vec<OsString> = [
        "-std=c11",
        "-D_GNU_SOURCE",
        "-DHAK_OVERRIDE=0",
        "-DHAK_STAT=1",
        "-O2",
        "-fPIC",
        "-fvisibility=hidden",
        "-ftls-model=initial-exec",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if env::var("DEBUG").map_or(false, |d| d == "true") {
        flags.push("-g".into());
    }
    for dir in [&include, &src] {
        let mut flag = OsString::from("-I");
        flag.push(dir);
        flags.push(flag);
    }

    let jobs: usize = env::var("NUM_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    let mut objects = Vec::new();
    let mut running: Vec<(Child, PathBuf)> = Vec::new();
    for source in &sources {
        let stem = source.file_stem().unwrap().to_string_lossy();
        let object = out.join(format!("hakmem-{}.o", stem));
        let child = Command::new(&cc)
            .args(&flags)
            .arg("-c")
            .arg(source)
            .arg("-o")
            .arg(&object)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run the C compiler {:?}: {}", cc, e));
        running.push((child, source.clone()));
        objects.push(object);
        if running.len() >= jobs {
            wait(running.remove(0));
        }
    }
    for job in running {
        wait(job);
    }

    // One object, all of hakmem's code in one piece, as the Makefile links
    // it (src/text.ld): the heap profile's stacks start past it.
    let whole = out.join("hakmem.o");
    let status = Command::new(&cc)
        .args(["-r", "-nostdlib", "-o"])
        .arg(&whole)
        .arg({
            let mut script = OsString::from("-Wl,-T,");
            script.push(src.join("text.ld"));
            script
        })
        .args(&objects)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {:?}: {}", cc, e));
    assert!(status.success(), "{:?} failed to link {}", cc, whole.display());

    let archive = out.join("libhakmem.a");
    let _ = fs::remove_file(&archive);
    let ar = tool("AR", "ar");
    let status = Command::new(&ar)
        .arg("crs")
        .arg(&archive)
        .arg(&whole)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the archiver {:?}: {}", ar, e));
    assert!(status.success(), "{:?} failed to write {}", ar, archive.display());

    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=hakmem");
    println!("cargo:rustc-link-lib=pthread");
    println!("cargo:include={}", include.display());
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=AR");
    rerun_if_changed(&include);
    rerun_if_changed(&src);
}

/// The tool a variable names, for this target first (`CC_x86_64_unknown_linux_gnu`).
fn tool(var: &str, default: &str) -> OsString {
    let target = env::var("TARGET").unwrap_or_default().replace('-', "_");
    let specific = format!("{}_{}", var, target);
    println!("cargo:rerun-if-env-changed={}", specific);
    env::var_os(&specific).or_else(|| env::var_os(var)).unwrap_or_else(|| default.into())
}

fn wait((mut child, source): (Child, PathBuf)) {
    let status = child.wait().unwrap();
    assert!(status.success(), "the C compiler failed on {}", source.display());
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
