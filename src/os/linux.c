/* The OS layer for Linux: memory (maps, reservations, guards, decommits,
 * remaps, the library's own code) and the counts of those calls. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "linux.h"
#include "os.h"
#include "track.h"

static size_t page_size = 4096;

static _Atomic uint64_t n_maps, n_map_bytes, n_unmaps, n_unmap_bytes, n_decommits, n_decommit_bytes, n_remaps;
static _Atomic uint64_t n_reserved_bytes;   /* address space reserved (MAP_NORESERVE), not memory */

static void count(_Atomic uint64_t *calls, _Atomic uint64_t *bytes, size_t size) {
  atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
  if (bytes) atomic_fetch_add_explicit(bytes, size, memory_order_relaxed);
}

void hak_os_counters(hak_os_counters_t *out) {
  out->maps = atomic_load(&n_maps);
  out->map_bytes = atomic_load(&n_map_bytes);
  out->unmaps = atomic_load(&n_unmaps);
  out->unmap_bytes = atomic_load(&n_unmap_bytes);
  out->decommits = atomic_load(&n_decommits);
  out->decommit_bytes = atomic_load(&n_decommit_bytes);
  out->remaps = atomic_load(&n_remaps);
  out->reserved_bytes = atomic_load(&n_reserved_bytes);
}

void hak_os_init(void) {
  unsigned long ps = getauxval(AT_PAGESZ);
  if (ps) page_size = ps;
}

size_t hak_os_page_size(void) { return page_size; }

static void *map_raw(void *hint, size_t size, int prot, int extra) {
  int e = errno;
  void *p = os_mmap(hint, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
  errno = e;
  if (p == MAP_FAILED) return NULL;
  count(&n_maps, extra & MAP_NORESERVE ? &n_reserved_bytes : &n_map_bytes, size);
  HAK_TRACK_MAPPED(p, size);
  return p;
}

void *hak_os_map(size_t size) { return map_raw(NULL, size, PROT_READ | PROT_WRITE, 0); }

void hak_os_unmap(void *p, size_t size) {
  int e = errno;
  count(&n_unmaps, &n_unmap_bytes, size);
  os_munmap(p, size);
  errno = e;
}

/* Where the next aligned mapping is likely to fit: just below the last one,
 * as the kernel places mappings top-down. */
static _Atomic uintptr_t aligned_hint;

/* Unmap a trimmed end of a mapping (of a reservation: extra has
 * MAP_NORESERVE, and the bytes come off the reserved ones). */
static void trim(void *p, size_t size, int extra) {
  if (!(extra & MAP_NORESERVE)) {
    hak_os_unmap(p, size);
    return;
  }
  int e = errno;
  count(&n_unmaps, NULL, 0);
  atomic_fetch_sub_explicit(&n_reserved_bytes, size, memory_order_relaxed);
  os_munmap(p, size);
  errno = e;
}

/* Over-allocate by align and trim both ends. */
static void *map_trimmed(size_t size, size_t align, int extra) {
  if (size + align < size) return NULL;
  char *p = map_raw(NULL, size + align, PROT_READ | PROT_WRITE, extra);
  if (!p) return NULL;
  uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = a - (uintptr_t)p;
  size_t tail = align - head;
  if (head) trim(p, head, extra);
  if (tail) trim((char *)a + size, tail, extra);
  return (void *)a;
}

/* One mmap at the hint when the kernel grants it (the common case), else
 * over-allocate and trim. */
void *hak_os_map_aligned(size_t size, size_t align) {
  uintptr_t span = (size + align - 1) & ~(uintptr_t)(align - 1);
  uintptr_t hint = atomic_load_explicit(&aligned_hint, memory_order_relaxed);
  if (hint > span && !(hint & (align - 1))) {
    char *q = map_raw((void *)(hint - span), size, PROT_READ | PROT_WRITE, 0);
    if (q && !((uintptr_t)q & (align - 1))) {
      atomic_store_explicit(&aligned_hint, (uintptr_t)q, memory_order_relaxed);
      return q;
    }
    if (q) hak_os_unmap(q, size);
  }
  char *a = map_trimmed(size, align, 0);
  if (a) atomic_store_explicit(&aligned_hint, (uintptr_t)a, memory_order_relaxed);
  return a;
}

/* Under strict overcommit (vm.overcommit_memory = 2) the kernel ignores
 * MAP_NORESERVE and would charge the whole range: refuse instead. */
void *hak_os_reserve_aligned(size_t size, size_t align) {
  char mode[8];
  if (hak_os_read_file("/proc/sys/vm/overcommit_memory", mode, sizeof mode) > 0 && mode[0] == '2') return NULL;
  return map_trimmed(size, align, MAP_NORESERVE);
}

/* A page size above the guard's leaves it an ordinary part of the range. */
static void protect(void *p, size_t size, int prot) {
  if ((uintptr_t)p & (page_size - 1) || size & (page_size - 1)) return;
  int e = errno;
  os_mprotect(p, size, prot);
  errno = e;
}

void hak_os_guard(void *p, size_t size) { protect(p, size, PROT_NONE); }

void hak_os_unguard(void *p, size_t size) { protect(p, size, PROT_READ | PROT_WRITE); }

void hak_os_decommit(void *p, size_t size) {
  int e = errno;
  count(&n_decommits, &n_decommit_bytes, size);
  os_madvise(p, size, MADV_DONTNEED);
  errno = e;
}

void hak_os_populate(void *p, size_t size) {
#ifdef MADV_POPULATE_WRITE
  int e = errno;
  os_madvise(p, size, MADV_POPULATE_WRITE);
  errno = e;
#else
  (void)p;
  (void)size;
#endif
}

size_t hak_os_resident_pages(const void *p, size_t size) {
  int e = errno;
  unsigned char vec[256];
  size_t resident = 0, step = sizeof vec * page_size;
  for (size_t off = 0; off < size; off += step) {
    size_t n = size - off < step ? size - off : step;
    if (os_mincore((char *)p + off, n, vec) != 0) {
      resident = 0;
      break;
    }
    for (size_t i = 0; i < n / page_size; i++) resident += vec[i] & 1;
  }
  errno = e;
  return resident;
}

/* Growing in place extends the mapping over the pages just past its end, if
 * they are free. mremap keeps it one mapping, which a later move needs:
 * mremap moves a single mapping, and pages mapped next to a mapping that was
 * moved are not merged with it (their page offsets do not follow on), so a
 * block grown that way could only be copied. ThreadSanitizer does not see
 * mremap and would keep the history of whatever was at those addresses
 * before, so its builds map the new pages instead (and copy on a move). */
int hak_os_remap_inplace(void *p, size_t old_size, size_t new_size) {
  int e = errno;
  count(&n_remaps, NULL, 0);
#if defined(__SANITIZE_THREAD__)
  char *want = (char *)p + old_size;
  void *q = os_mmap(want, new_size - old_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                 -1, 0);
  if (q != MAP_FAILED && q != want) os_munmap(q, new_size - old_size);   /* a kernel before 4.17: only a hint */
  errno = e;
  return q == want ? 0 : -1;
#else
  void *q = os_mremap(p, old_size, new_size, 0);
  errno = e;
  if (q != p) return -1;
  HAK_TRACK_MAPPED(p, new_size);
  return 0;
#endif
}

/* Reserve an aligned target without access, then move the pages into it. */
void *hak_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align) {
  int e = errno;
  char *r = os_mmap(NULL, new_size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) {
    errno = e;
    return NULL;
  }
  uintptr_t a = ((uintptr_t)r + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = a - (uintptr_t)r;
  if (head) os_munmap(r, head);
  if (align - head) os_munmap((char *)a + new_size, align - head);
  count(&n_remaps, NULL, 0);
  void *q = os_mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a);
  if (q == MAP_FAILED) {
    os_munmap((void *)a, new_size);
    q = NULL;
  } else {
    HAK_TRACK_MAPPED(q, new_size);
  }
  errno = e;
  return q;
}

/* Executable while written, in case another thread runs the page's other
 * code meanwhile. */
bool hak_os_code_write(void *at, const void *bytes, size_t n) {
  size_t page = hak_os_page_size();
  uintptr_t lo = (uintptr_t)at & ~(page - 1), hi = ((uintptr_t)at + n + page - 1) & ~(page - 1);
  int e = errno;
  bool ok = os_mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) == 0;
  if (ok) {
    memcpy(at, bytes, n);
    os_mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC);
    __builtin___clear_cache((char *)at, (char *)at + n);
  }
  errno = e;
  return ok;
}
