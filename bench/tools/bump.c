/* libbump.so: the baseline of `make bench-perf` (bench/perf.py). malloc is
 * a pointer bump in one large mapping, free does nothing: a benchmark run
 * under it counts the instructions of the benchmark's own loop (random
 * numbers, the writes into its blocks) plus the few of the bump, which
 * bench-perf subtracts from each allocator's run to leave the allocator's
 * own.
 *
 * Blocks start 16-byte aligned (or at the alignment asked for). Memory is
 * never reused; the mapping is reserved without commit charge and pages
 * cost only once touched. realloc copies as many bytes as the new size
 * from the old block (the mapping goes on after it). Not a real allocator. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static char *base;
static size_t arena;   /* 64 GiB, or less where that much cannot be had (valgrind) */
static _Atomic size_t used;

__attribute__((constructor)) static void bump_init(void) {
  if (base) return;   /* a malloc before the constructor did it */
  for (arena = (size_t)64 << 30; arena >= ((size_t)1 << 30); arena /= 4) {
    void *p = mmap(NULL, arena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      base = p;
      return;
    }
  }
}

static void *bump(size_t size, size_t align) {
  if (__builtin_expect(!base, 0)) bump_init();
  size_t need = size ? (size + 15) & ~(size_t)15 : 16;
  if (align > 16) need += align;
  size_t at = atomic_fetch_add_explicit(&used, need, memory_order_relaxed);
  if (__builtin_expect(at + need > arena || need < size, 0)) {
    errno = ENOMEM;
    return NULL;
  }
  return (void *)(((uintptr_t)base + at + align - 1) & ~(uintptr_t)(align - 1));
}

void *malloc(size_t size) { return bump(size, 16); }

void free(void *p) { (void)p; }

void *calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return bump(total, 16);   /* fresh pages of the mapping are zero */
}

void *realloc(void *p, size_t size) {
  void *q = bump(size, 16);
  if (q && p) memcpy(q, p, size < (size_t)((char *)q - (char *)p) ? size : (size_t)((char *)q - (char *)p));
  return q;
}

void *aligned_alloc(size_t align, size_t size) { return bump(size, align < 16 ? 16 : align); }

void *memalign(size_t align, size_t size) { return bump(size, align < 16 ? 16 : align); }

int posix_memalign(void **out, size_t align, size_t size) {
  void *p = bump(size, align < 16 ? 16 : align);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

size_t malloc_usable_size(void *p) { return 0; }
