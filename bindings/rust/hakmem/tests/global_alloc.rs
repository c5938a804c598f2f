//! hakmem as the global allocator of this test program: collections churned
//! across threads keep their contents, every layout gets its alignment, and
//! the blocks are hakmem's (its usable size answers for them; a foreign
//! pointer would stop the program).
use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
use std::collections::HashMap;
use std::thread;

use hakmem::HakMem;

#[global_allocator]
static GLOBAL: HakMem = HakMem;

fn key(t: usize, i: usize) -> String {
    format!("thread {} key {}", t, i)
}

#[test]
fn collections_churn_across_threads() {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                let mut map: HashMap<String, Vec<u32>> = HashMap::new();
                for round in 0..20 {
                    for i in 0..2000 {
                        let n = (i * 7 + round) % 300;
                        map.insert(key(t, i), (0..n as u32).map(|x| x ^ t as u32).collect());
                    }
                    for i in (0..2000).step_by(3) {
                        map.remove(&key(t, i));
                    }
                }
                map
            })
        })
        .collect();
    // Each map is dropped here, by another thread than the one that built it.
    for (t, handle) in threads.into_iter().enumerate() {
        let map = handle.join().unwrap();
        assert_eq!(map.len(), 2000 - 667);
        for (k, v) in &map {
            let i: usize = k.rsplit(' ').next().unwrap().parse().unwrap();
            assert_eq!(k, &key(t, i));
            assert_eq!(v.len(), (i * 7 + 19) % 300);
            assert!(v.iter().enumerate().all(|(x, &y)| y == x as u32 ^ t as u32));
        }
    }
}

#[test]
fn strings_and_vectors_grow_and_keep_contents() {
    let mut s = String::new();
    let mut v: Vec<u64> = Vec::new();
    for i in 0..200_000u64 {
        s.push(char::from(b'a' + (i % 26) as u8));
        v.push(i * i);
    }
    assert!(s.bytes().enumerate().all(|(i, b)| b == b'a' + (i % 26) as u8));
    assert!(v.iter().enumerate().all(|(i, &x)| x == (i as u64) * (i as u64)));
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v, (0..10u64).map(|i| i * i).collect::<Vec<_>>());
    assert!(unsafe { hakmem::usable_size(v.as_ptr() as *const u8) } >= 80);
}

#[test]
fn every_alignment_is_honoured() {
    for shift in 0..16 {
        let align = 1usize << shift;
        for &size in &[1usize, 7, 16, 100, 4096, 70_000, 3 << 20] {
            let layout = Layout::from_size_align(size, align).unwrap();
            unsafe {
                let p = alloc(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {} align {}", size, align);
                p.write_bytes(0xab, size);
                let q = realloc(p, layout, size * 2 + 1);
                assert!(!q.is_null());
                assert_eq!(q as usize % align, 0, "realloc to {} align {}", size * 2 + 1, align);
                assert!(std::slice::from_raw_parts(q, size).iter().all(|&b| b == 0xab));
                dealloc(q, Layout::from_size_align(size * 2 + 1, align).unwrap());

                let z = alloc_zeroed(layout);
                assert_eq!(z as usize % align, 0);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                dealloc(z, layout);
            }
        }
    }
}

#[test]
fn blocks_are_hakmems_and_reused() {
    let b = Box::new([7u8; 48]);
    assert!(unsafe { hakmem::usable_size(b.as_ptr()) } >= 48);
    let first = Box::into_raw(b) as usize;
    unsafe { drop(Box::from_raw(first as *mut [u8; 48])) };
    // The thread's cache hands the block it just took back out again.
    let again = Box::new([9u8; 48]);
    assert_eq!(again.as_ptr() as usize, first);
}

#[test]
fn options_and_statistics() {
    assert!(hakmem::options_text().contains("HAKMEM_PURGE_DELAY_MS"));
    let before = hakmem::option("purge_delay_ms").unwrap();
    hakmem::set_option("PURGE_DELAY_MS", "250").unwrap();
    assert_eq!(hakmem::option("HAKMEM_PURGE_DELAY_MS").unwrap(), 250);
    hakmem::set_option("PURGE_DELAY_MS", &before.to_string()).unwrap();
    assert_eq!(
        hakmem::set_option("PURGE_DELAY_MS", "soon"),
        Err(hakmem::OptionError::Invalid { name: "PURGE_DELAY_MS".into(), value: "soon".into() })
    );
    assert_eq!(hakmem::set_option("NO_SUCH", "1"), Err(hakmem::OptionError::Unknown("NO_SUCH".into())));

    let big: Vec<u8> = vec![1; 8 << 20];
    let json = hakmem::stats_json();
    assert!(json.starts_with("{\"version\":\"0.1.0\""), "{}", &json[..40.min(json.len())]);
    assert!(json.contains("\"large\":{"));
    assert!(hakmem::stats_text().contains("hakmem statistics"));
    drop(big);
    hakmem::trim();
}
