/* Conformance of the malloc family: every entry point, its alignment, its
 * usable size, content preservation, zeroing, error returns and errno. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "check.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
/* Blocks larger than this are filled and verified only at both ends. */
#define FULL_FILL_MAX (256 * KiB)
#define EDGE (64 * KiB)

/* Keep the compiler from reasoning about sizes and pointers it would
 * otherwise warn about (huge requests, use of a block after a realloc that
 * is expected to fail). */
static size_t opaque_size(size_t n) {
  volatile size_t v = n;
  return v;
}

static void *opaque_ptr(void *p) {
  void *volatile v = p;
  return v;
}

static size_t pow2floor(size_t n) {
  size_t p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

static size_t pow2ceil(size_t n) {
  size_t p = 1;
  while (p < n) p *= 2;
  return p;
}

/* The alignment a block of `size` bytes must have: 16, or for requests
 * below 16 bytes the largest power of two not above the request. */
static size_t required_align(size_t size) {
  if (size >= 16) return 16;
  return pow2floor(size ? size : 1);
}

static int is_aligned(const void *p, size_t align) {
  return (uintptr_t)p % align == 0;
}

static unsigned char pat(size_t i, unsigned seed) {
  return (unsigned char)((i ^ (i >> 8) ^ (i >> 16)) * 37u + seed * 101u + 1u);
}

static void fill_range(unsigned char *p, size_t from, size_t to, unsigned seed) {
  for (size_t i = from; i < to; i++) p[i] = pat(i, seed);
}

static int verify_range(const unsigned char *p, size_t from, size_t to,
                        unsigned seed) {
  for (size_t i = from; i < to; i++)
    if (p[i] != pat(i, seed)) return 0;
  return 1;
}

/* Small blocks are filled completely, big ones only in their first and
 * last EDGE bytes. */
static void fill(void *p, size_t n, unsigned seed) {
  if (n <= FULL_FILL_MAX) {
    fill_range(p, 0, n, seed);
  } else {
    fill_range(p, 0, EDGE, seed);
    fill_range(p, n - EDGE, n, seed);
  }
}

static int verify(const void *p, size_t n, unsigned seed) {
  if (n <= FULL_FILL_MAX) return verify_range(p, 0, n, seed);
  return verify_range(p, 0, EDGE, seed) && verify_range(p, n - EDGE, n, seed);
}

static int all_zero(const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i]) return 0;
  return 1;
}

static int zero_edges(const void *p, size_t n) {
  if (n <= FULL_FILL_MAX) return all_zero(p, n);
  return all_zero(p, EDGE) && all_zero((const char *)p + n - EDGE, EDGE);
}

/* Sizes above 4 KiB up to 64 MiB: around every power of two and between. */
static size_t big_sizes(size_t *out) {
  size_t n = 0;
  for (size_t s = 8 * KiB; s <= 64 * MiB; s *= 2) {
    out[n++] = s - 1;
    out[n++] = s;
    if (s < 64 * MiB) {
      out[n++] = s + 1;
      out[n++] = s + s / 2 + 7;
    }
  }
  return n;
}
#define MAX_BIG_SIZES 64

static void check_block(void *p, size_t size, const char *what) {
  CHECK(p != NULL, "%s(%zu) returned NULL", what, size);
  if (!p) return;
  CHECK(is_aligned(p, required_align(size)), "%s(%zu) = %p misaligned", what,
        size, p);
  CHECK(T_usable_size(p) >= size, "%s(%zu): usable size %zu", what, size,
        T_usable_size(p));
}

static void test_malloc_zero(void) {
  enum { N = 1000 };
  static void *ptrs[N];
  for (int i = 0; i < N; i++) {
    ptrs[i] = T_malloc(0);
    CHECK(ptrs[i] != NULL, "malloc(0) #%d returned NULL", i);
  }
  int dups = 0;
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++)
      if (ptrs[i] && ptrs[i] == ptrs[j]) dups++;
  CHECK(dups == 0, "malloc(0) returned %d duplicate pointers", dups);
  for (int i = 0; i < N; i++) T_free(ptrs[i]);

  void *a = T_calloc(0, 16), *b = T_calloc(16, 0);
  CHECK(a != NULL && b != NULL && a != b, "calloc with a zero count: %p %p", a,
        b);
  T_free(a);
  T_free(b);
}

/* Every size 1..4096 from malloc and calloc, all alive at once, then grown
 * and shrunk with realloc; contents must survive every step. */
static void test_small_sizes(void) {
  enum { N = 4096 };
  static unsigned char *m[N + 1], *c[N + 1];
  static size_t c_usable[N + 1];
  int bad_fill = 0, bad_zero = 0, bad_grow = 0, bad_shrink = 0;
  for (size_t s = 1; s <= N; s++) {
    m[s] = T_malloc(s);
    check_block(m[s], s, "malloc");
    c[s] = T_calloc(1, s);
    check_block(c[s], s, "calloc");
    if (!m[s] || !c[s]) return;
    if (!all_zero(c[s], s)) bad_zero++;
    fill(m[s], s, (unsigned)s);
    /* All of the usable size belongs to the block. */
    c_usable[s] = T_usable_size(c[s]);
    fill(c[s], c_usable[s], (unsigned)s + 7);
  }
  for (size_t s = 1; s <= N; s++)
    if (!verify(m[s], s, (unsigned)s) ||
        !verify(c[s], c_usable[s], (unsigned)s + 7))
      bad_fill++;
  CHECK(bad_zero == 0, "%d calloc blocks were not zeroed", bad_zero);
  CHECK(bad_fill == 0, "%d blocks lost their contents", bad_fill);

  for (size_t s = 1; s <= N; s++) {
    size_t grown = 2 * s + 3;
    unsigned char *p = T_realloc(m[s], grown);
    check_block(p, grown, "realloc grow");
    if (!p) return;
    m[s] = p;
    if (!verify(p, s, (unsigned)s)) bad_grow++;
    fill(p, grown, (unsigned)s);
  }
  for (size_t s = 1; s <= N; s++) {
    size_t shrunk = s / 2 + 1;
    unsigned char *p = T_realloc(m[s], shrunk);
    check_block(p, shrunk, "realloc shrink");
    if (!p) return;
    m[s] = p;
    if (!verify(p, shrunk, (unsigned)s)) bad_shrink++;
  }
  CHECK(bad_grow == 0, "%d blocks corrupted by realloc grow", bad_grow);
  CHECK(bad_shrink == 0, "%d blocks corrupted by realloc shrink", bad_shrink);
  for (size_t s = 1; s <= N; s++) {
    T_free(m[s]);
    T_free(c[s]);
  }
}

/* One block walked through every size 1..4096 and back by realloc. */
static void test_realloc_steps(void) {
  unsigned char *p = T_realloc(NULL, 1);
  check_block(p, 1, "realloc(NULL)");
  if (!p) return;
  p[0] = pat(0, 3);
  int bad = 0;
  for (size_t s = 2; s <= 4096; s++) {
    p = T_realloc(p, s);
    check_block(p, s, "realloc step up");
    if (!p) return;
    if (!verify_range(p, 0, s - 1, 3)) bad++;
    p[s - 1] = pat(s - 1, 3);
  }
  for (size_t s = 4095; s >= 1; s--) {
    p = T_realloc(p, s);
    check_block(p, s, "realloc step down");
    if (!p) return;
    if (!verify_range(p, 0, s, 3)) bad++;
  }
  CHECK(bad == 0, "%d realloc steps lost contents", bad);
  T_free(p);
}

static void test_big_sizes(void) {
  size_t sizes[MAX_BIG_SIZES];
  size_t n = big_sizes(sizes);
  void *m[MAX_BIG_SIZES], *c[MAX_BIG_SIZES];
  for (size_t i = 0; i < n; i++) {
    m[i] = T_malloc(sizes[i]);
    check_block(m[i], sizes[i], "malloc");
    c[i] = T_calloc(sizes[i], 1);
    check_block(c[i], sizes[i], "calloc");
    if (!m[i] || !c[i]) return;
    CHECK(zero_edges(c[i], sizes[i]), "calloc(%zu) not zeroed", sizes[i]);
    fill(m[i], sizes[i], (unsigned)i);
    fill(c[i], sizes[i], (unsigned)i + 50);
  }
  for (size_t i = 0; i < n; i++) {
    CHECK(verify(m[i], sizes[i], (unsigned)i), "malloc(%zu) lost contents",
          sizes[i]);
    CHECK(verify(c[i], sizes[i], (unsigned)i + 50),
          "calloc(%zu) lost contents", sizes[i]);
    T_free(m[i]);
    T_free(c[i]);
  }

  /* The same sizes through realloc, upwards then downwards. */
  void *p = T_realloc(NULL, 4096);
  if (!p) return;
  fill(p, 4096, 9);
  size_t cur = 4096;
  for (size_t i = 0; i < n; i++) {
    void *q = T_realloc(p, sizes[i]);
    check_block(q, sizes[i], "realloc");
    if (!q) break;
    p = q;
    CHECK(verify(p, cur, 9), "realloc %zu -> %zu lost contents", cur, sizes[i]);
    fill(p, sizes[i], 9);
    cur = sizes[i];
  }
  for (size_t i = n; i-- > 0;) {
    fill(p, sizes[i], 9);
    void *q = T_realloc(p, sizes[i]);
    check_block(q, sizes[i], "realloc");
    if (!q) break;
    p = q;
    CHECK(verify(p, sizes[i], 9), "realloc shrink to %zu lost contents",
          sizes[i]);
  }
  T_free(p);
}

/* tiny -> mid -> large -> huge by realloc, up to 256 MiB, and back. */
static void test_realloc_chain(void) {
  static const size_t chain[] = {1, 8, 24, 100, 700, 3000, 20000, 70000,
                                 300 * KiB, 2 * MiB, 9 * MiB, 40 * MiB,
                                 130 * MiB, 256 * MiB};
  const size_t n = sizeof chain / sizeof chain[0];
  void *p = T_malloc(chain[0]);
  check_block(p, chain[0], "malloc");
  if (!p) return;
  fill(p, chain[0], 77);
  for (size_t i = 1; i < n; i++) {
    void *q = T_realloc(p, chain[i]);
    check_block(q, chain[i], "realloc chain");
    if (!q) break;
    p = q;
    CHECK(verify(p, chain[i - 1], 77), "realloc %zu -> %zu lost contents",
          chain[i - 1], chain[i]);
    fill(p, chain[i], 77);
  }
  for (size_t i = n - 1; i-- > 0;) {
    fill(p, chain[i], 78);
    void *q = T_realloc(p, chain[i]);
    check_block(q, chain[i], "realloc chain down");
    if (!q) break;
    p = q;
    CHECK(verify(p, chain[i], 78), "realloc down to %zu lost contents",
          chain[i]);
  }
  T_free(p);
}

/* Dirty memory freed and handed back by calloc must come back zeroed. */
static void test_calloc_dirty(void) {
  int bad = 0;
  for (size_t s = 1; s <= 4096; s++) {
    void *p = T_malloc(s);
    if (!p) { bad++; continue; }
    memset(p, 0xAB, s);
    T_free(p);
    void *q = T_calloc(s, 1);
    if (!q || !all_zero(q, s)) bad++;
    T_free(q);
  }
  CHECK(bad == 0, "%d small calloc-after-dirty-free blocks not zeroed", bad);

  size_t sizes[MAX_BIG_SIZES];
  size_t n = big_sizes(sizes);
  for (size_t i = 0; i < n; i++) {
    size_t s = sizes[i];
    void *p = T_malloc(s);
    if (!p) { CHECK(0, "malloc(%zu) failed", s); continue; }
    memset(p, 0xAB, s);
    T_free(p);
    void *q = T_calloc(1, s);
    CHECK(q != NULL && all_zero(q, s), "calloc(%zu) after dirty free", s);
    T_free(q);
  }

  static const size_t huge[] = {8 * MiB, 100 * MiB};
  for (size_t i = 0; i < 2; i++) {
    void *p = T_malloc(huge[i]);
    if (p) memset(p, 0xAB, huge[i]);
    T_free(p);
    void *q = T_calloc(huge[i] / 8, 8);
    CHECK(q != NULL && all_zero(q, huge[i]), "calloc(%zu) not zeroed", huge[i]);
    T_free(q);
  }
}

static void test_overflow(void) {
  errno = 0;
  CHECK(T_calloc(opaque_size(SIZE_MAX / 2 + 1), 3) == NULL && errno == ENOMEM,
        "calloc overflow: errno %d", errno);
  errno = 0;
  CHECK(T_calloc(opaque_size(SIZE_MAX), opaque_size(SIZE_MAX)) == NULL &&
            errno == ENOMEM,
        "calloc(SIZE_MAX, SIZE_MAX): errno %d", errno);
  errno = 0;
  CHECK(T_malloc(opaque_size(SIZE_MAX)) == NULL && errno == ENOMEM,
        "malloc(SIZE_MAX): errno %d", errno);
  errno = 0;
  CHECK(T_malloc(opaque_size((size_t)PTRDIFF_MAX + 1)) == NULL &&
            errno == ENOMEM,
        "malloc(PTRDIFF_MAX+1): errno %d", errno);

  static const size_t old_sizes[] = {40, 5000, 3 * MiB};
  static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4095,
                                (size_t)PTRDIFF_MAX + 1, PTRDIFF_MAX};
  for (size_t i = 0; i < 3; i++) {
    size_t s = old_sizes[i];
    void *p = T_malloc(s);
    if (!p) { CHECK(0, "malloc(%zu) failed", s); continue; }
    fill(p, s, 5);
    errno = 0;
    CHECK(T_reallocarray(opaque_ptr(p), opaque_size(SIZE_MAX / 2 + 1), 3) ==
                  NULL &&
              errno == ENOMEM,
          "reallocarray overflow: errno %d", errno);
    CHECK(verify(p, s, 5), "reallocarray failure damaged the %zu block", s);
    for (size_t j = 0; j < 4; j++) {
      errno = 0;
      CHECK(T_realloc(opaque_ptr(p), opaque_size(huge[j])) == NULL &&
                errno == ENOMEM,
            "realloc(%zu-byte block, %zu): errno %d", s, huge[j], errno);
      CHECK(verify(p, s, 5), "failed realloc damaged the %zu block", s);
    }
    void *q = T_reallocarray(p, 3, s);
    check_block(q, 3 * s, "reallocarray");
    if (!q) { T_free(p); continue; }
    CHECK(verify(q, s, 5), "reallocarray lost the %zu block contents", s);
    T_free(q);
  }

  void *p = NULL;
  CHECK(T_posix_memalign(&p, 64, opaque_size(SIZE_MAX)) == ENOMEM,
        "posix_memalign(SIZE_MAX) did not fail with ENOMEM");
  errno = 0;
  CHECK(T_aligned_alloc(64, opaque_size(SIZE_MAX)) == NULL && errno == ENOMEM,
        "aligned_alloc(64, SIZE_MAX): errno %d", errno);
}

static void test_realloc_edge(void) {
  void *p = T_realloc(NULL, 100);
  check_block(p, 100, "realloc(NULL)");
  if (p) {
    fill(p, 100, 1);
    CHECK(verify(p, 100, 1), "realloc(NULL) block not writable");
    T_free(p);
  }

  static const size_t sizes[] = {1, 64, 3000, 70000, 2 * MiB};
  for (size_t i = 0; i < 5; i++) {
    void *q = T_malloc(sizes[i]);
    if (!q) continue;
    q = T_realloc(q, 0);
    T_free(q);
  }
  CHECK(1, "realloc(p, 0) did not crash");
}

static void check_memalign_result(void *p, size_t align, size_t size,
                                  const char *what) {
  CHECK(p != NULL, "%s(align %zu, size %zu) returned NULL", what, align, size);
  if (!p) return;
  CHECK(is_aligned(p, align), "%s(align %zu, size %zu) = %p", what, align, size,
        p);
  CHECK(T_usable_size(p) >= size, "%s(%zu, %zu): usable %zu", what, align, size,
        T_usable_size(p));
  if (size) {
    unsigned char *c = p;
    c[size - 1] = 0xA5;
    c[0] = 0x5A;
    CHECK(c[0] == 0x5A && (size == 1 || c[size - 1] == 0xA5),
          "%s block not writable", what);
  }
}

static void test_aligned(void) {
  static const size_t bad_align[] = {0, 3, 24, sizeof(void *) / 2};
  for (size_t i = 0; i < 4; i++) {
    void *p = (void *)0x1;
    errno = 1234;
    int rc = T_posix_memalign(&p, bad_align[i], 100);
    CHECK(rc == EINVAL, "posix_memalign(align %zu) returned %d", bad_align[i],
          rc);
    CHECK(errno == 1234, "posix_memalign(align %zu) changed errno to %d",
          bad_align[i], errno);
  }

  static const size_t bad_aligned_alloc[] = {3, 24, 100, 4097};
  for (size_t i = 0; i < 4; i++) {
    errno = 0;
    void *p = T_aligned_alloc(bad_aligned_alloc[i], 200);
    CHECK(p == NULL && errno == EINVAL, "aligned_alloc(%zu): %p errno %d",
          bad_aligned_alloc[i], p, errno);
    T_free(p);
  }

  for (size_t align = 8; align <= 64 * MiB; align *= 2) {
    const size_t sizes[] = {0, 1, 100, align, 3 * align + 5};
    for (size_t i = 0; i < 5; i++) {
      void *p = NULL;
      int rc = T_posix_memalign(&p, align, sizes[i]);
      CHECK(rc == 0, "posix_memalign(%zu, %zu) returned %d", align, sizes[i],
            rc);
      if (rc == 0) {
        check_memalign_result(p, align, sizes[i], "posix_memalign");
        T_free(p);
      }
    }
  }

  for (size_t align = 1; align <= 64 * MiB; align *= 2) {
    const size_t sizes[] = {1, 100, align};
    for (size_t i = 0; i < 3; i++) {
      void *p = T_aligned_alloc(align, sizes[i]);
      check_memalign_result(p, align, sizes[i], "aligned_alloc");
      T_free(p);
      p = T_memalign(align, sizes[i]);
      check_memalign_result(p, align, sizes[i], "memalign");
      T_free(p);
    }
  }

  static const size_t odd_align[] = {24, 100, 1000, 3000, 5000, 70000};
  for (size_t i = 0; i < 6; i++) {
    void *p = T_memalign(odd_align[i], 50);
    check_memalign_result(p, pow2ceil(odd_align[i]), 50, "memalign");
    T_free(p);
  }

  static const size_t realloc_align[] = {64, 4096, 2 * MiB};
  for (size_t i = 0; i < 3; i++) {
    void *p = T_aligned_alloc(realloc_align[i], 1000);
    check_memalign_result(p, realloc_align[i], 1000, "aligned_alloc");
    if (!p) continue;
    fill(p, 1000, 11);
    void *q = T_realloc(p, 300000);
    check_block(q, 300000, "realloc of an aligned block");
    if (!q) { T_free(p); continue; }
    CHECK(verify(q, 1000, 11), "realloc of an aligned block lost contents");
    fill(q, 300000, 12);
    p = T_realloc(q, 10);
    check_block(p, 10, "realloc of an aligned block");
    if (!p) { T_free(q); continue; }
    CHECK(verify(p, 10, 12), "realloc shrink of an aligned block");
    T_free(p);
  }

  /* 0 bytes at a large alignment: the block still starts inside a mapping
   * (msync fails with ENOMEM on an unmapped page) */
  static const size_t zero_align[] = {128 * 1024, 1 * MiB, 2 * MiB, 4 * MiB};
  for (size_t i = 0; i < 4; i++) {
    void *p = NULL;
    int rc = T_posix_memalign(&p, zero_align[i], 0);
    CHECK(rc == 0 && p, "posix_memalign(%zu, 0) returned %d", zero_align[i], rc);
    if (!p) continue;
    void *page_of_p = (void *)((uintptr_t)p & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1));
    CHECK(msync(page_of_p, 1, MS_ASYNC) == 0, "posix_memalign(%zu, 0) = %p is not in a mapping", zero_align[i], p);
    T_free(p);
  }

  /* a 2 MiB-aligned block shrunk to a few bytes moves: its mapping goes */
  void *big = T_aligned_alloc(2 * MiB, 3 * MiB);
  check_memalign_result(big, 2 * MiB, 3 * MiB, "aligned_alloc");
  if (big) {
    fill(big, 300, 13);
    void *small = T_realloc(big, 200);
    check_block(small, 200, "realloc shrink of a 2 MiB-aligned block");
    CHECK(small && verify(small, 200, 13), "realloc shrink of a 2 MiB-aligned block lost contents");
    CHECK(small && T_usable_size(small) < 4096, "realloc to 200 B kept %zu usable bytes",
          small ? T_usable_size(small) : 0);
    T_free(small);
  }

  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  static const size_t page_sizes[] = {1, 100, 4095, 4097, 100000, 3 * MiB + 1};
  for (size_t i = 0; i < 6; i++) {
    size_t s = page_sizes[i];
    void *p = T_valloc(s);
    check_memalign_result(p, page, s, "valloc");
    T_free(p);
    p = T_pvalloc(s);
    check_memalign_result(p, page, s, "pvalloc");
    if (p) {
      size_t rounded = (s + page - 1) / page * page;
      CHECK(T_usable_size(p) >= rounded, "pvalloc(%zu): usable %zu < %zu", s,
            T_usable_size(p), rounded);
    }
    T_free(p);
  }
}

static void test_misc(void) {
  CHECK(T_usable_size(NULL) == 0, "usable_size(NULL) != 0");
  T_free(NULL);
  CHECK(1, "free(NULL) returned");

  static const size_t sizes[] = {1, 16, 100, 1000, 8000, 70000, 3 * MiB};
  for (size_t i = 0; i < 7; i++) {
    void *p = T_malloc(sizes[i]);
    CHECK(p != NULL, "malloc(%zu)", sizes[i]);
    T_free_sized(p, sizes[i]);
    p = T_aligned_alloc(256, sizes[i]);
    CHECK(p != NULL, "aligned_alloc(256, %zu)", sizes[i]);
    T_free_aligned_sized(p, 256, sizes[i]);
  }
  T_free_sized(NULL, 0);
  T_free_aligned_sized(NULL, 64, 0);
  CHECK(1, "free_sized(NULL) returned");

  int r = T_trim();
  CHECK(r == 0 || r == 1, "trim returned %d", r);
}

/* Memory released by trim comes back usable and, through calloc, zeroed. */
static void test_trim_reuse(void) {
  enum { N = 20000 };
  static unsigned char *blocks[N];
  static const size_t sizes[] = {16, 200, 1500, 9000, 200000};
  int bad = 0;
  for (size_t k = 0; k < 5; k++) {
    size_t n = sizes[k] > 100000 ? 200 : N;
    for (size_t i = 0; i < n; i++) {
      blocks[i] = T_malloc(sizes[k]);
      if (blocks[i]) memset(blocks[i], 0xCD, sizes[k]);
    }
    for (size_t i = 0; i < n; i++) T_free(blocks[i]);
    T_trim();
    for (size_t i = 0; i < n; i++) {
      blocks[i] = T_calloc(1, sizes[k]);
      if (!blocks[i] || !all_zero(blocks[i], sizes[k])) bad++;
      if (blocks[i]) fill(blocks[i], sizes[k], (unsigned)i);
    }
    for (size_t i = 0; i < n; i++) {
      if (blocks[i] && !verify(blocks[i], sizes[k], (unsigned)i)) bad++;
      T_free(blocks[i]);
    }
  }
  CHECK(bad == 0, "%d blocks bad after trim", bad);
}

static void test_reuse(void) {
  void *p = T_malloc(64);
  uintptr_t first = (uintptr_t)p;
  T_free(p);
  void *q = T_malloc(64);
  CHECK((uintptr_t)q == first, "malloc(64) after free: %p, was %#jx", q,
        (uintmax_t)first);
  T_free(q);
}

static void test_random_churn(void) {
  enum { SLOTS = 1024, ITERS = 1000000 };
  static unsigned char *slot[SLOTS];
  static size_t slot_size[SLOTS];
  uint64_t rng = 0x9E3779B97F4A7C15u;
  int bad = 0, failed = 0;
  for (int it = 0; it < ITERS; it++) {
    uint64_t r = xorshift64(&rng);
    size_t i = r % SLOTS;
    if (slot[i]) {
      unsigned char tag = (unsigned char)i;
      if (slot[i][0] != tag || slot[i][slot_size[i] - 1] != tag) bad++;
      T_free(slot[i]);
    }
    size_t size = 1 + (r >> 32) % 2000;
    slot[i] = T_malloc(size);
    if (!slot[i]) { failed++; continue; }
    slot_size[i] = size;
    slot[i][0] = slot[i][size - 1] = (unsigned char)i;
  }
  for (size_t i = 0; i < SLOTS; i++) T_free(slot[i]);
  CHECK(failed == 0, "%d allocations failed in the random loop", failed);
  CHECK(bad == 0, "%d blocks corrupted in the random loop", bad);
}

static void check_errno_kept(void) {
  errno = 1234;
  void *a = T_malloc(24);
  void *b = T_malloc(20000);
  void *c = T_malloc(5 * MiB);
  void *d = T_calloc(10, 100);
  void *e = T_aligned_alloc(4096, 4096);
  void *f = NULL;
  int rc = T_posix_memalign(&f, 128, 1000);
  a = T_realloc(a, 100000);
  c = T_realloc(c, 20 * MiB);
  b = T_realloc(b, 10);
  size_t u = T_usable_size(a);
  T_free(a);
  T_free(b);
  T_free(c);
  T_free(d);
  T_free(e);
  T_free(f);
  CHECK(errno == 1234 && rc == 0 && u >= 100000,
        "successful calls changed errno to %d", errno);
}

static void *errno_thread(void *arg) {
  check_errno_kept();
  return arg;
}

static void test_errno(void) {
  check_errno_kept();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, errno_thread, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
}

#ifndef TEST_VIA_HAK
/* The hak_* names are the same allocator as the overridden libc names, so
 * blocks may be freed through either. */
static void test_hak_names(void) {
  void *p = hak_malloc(100);
  check_block(p, 100, "hak_malloc");
  CHECK(hak_usable_size(p) == malloc_usable_size(p), "usable sizes differ");
  free(p);
  p = malloc(300);
  CHECK(hak_usable_size(p) >= 300, "hak_usable_size of a malloc block");
  hak_free(p);

  p = hak_calloc(10, 10);
  CHECK(p && all_zero(p, 100), "hak_calloc");
  p = hak_realloc(p, 5000);
  check_block(p, 5000, "hak_realloc");
  p = hak_reallocarray(p, 100, 100);
  check_block(p, 10000, "hak_reallocarray");
  hak_free_sized(p, 10000);

  p = hak_aligned_alloc(1024, 1024);
  check_memalign_result(p, 1024, 1024, "hak_aligned_alloc");
  free(p);
  CHECK(hak_posix_memalign(&p, 64, 64) == 0, "hak_posix_memalign");
  check_memalign_result(p, 64, 64, "hak_posix_memalign");
  hak_free_aligned_sized(p, 64, 64);
  p = hak_memalign(32, 10);
  check_memalign_result(p, 32, 10, "hak_memalign");
  hak_free(p);
  p = hak_valloc(10);
  check_memalign_result(p, 4096, 10, "hak_valloc");
  hak_free(p);
  p = hak_pvalloc(10);
  check_memalign_result(p, 4096, 4096, "hak_pvalloc");
  hak_free(p);

  int r = hak_trim();
  CHECK(r == 0 || r == 1, "hak_trim returned %d", r);
}
#endif

static const test_case_t cases[] = {
    {"malloc_zero", test_malloc_zero},
    {"small_sizes", test_small_sizes},
    {"realloc_steps", test_realloc_steps},
    {"big_sizes", test_big_sizes},
    {"realloc_chain", test_realloc_chain},
    {"calloc_dirty", test_calloc_dirty},
    {"overflow", test_overflow},
    {"realloc_edge", test_realloc_edge},
    {"aligned", test_aligned},
    {"misc", test_misc},
    {"trim_reuse", test_trim_reuse},
    {"reuse", test_reuse},
    {"random_churn", test_random_churn},
    {"errno", test_errno},
#ifndef TEST_VIA_HAK
    {"hak_names", test_hak_names},
#endif
};

int main(int argc, char **argv) {
  return RUN_CASES("api", cases, argc, argv);
}
