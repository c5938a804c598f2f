/* A malloc shim over glibc with one planted bug, to show that the fuzzer
 * fails when an allocator is wrong (tests/fuzz_plant.sh). Built only for
 * that check, as build/test/fuzz_shim.so, and preloaded into the fuzzer
 * linked with plain glibc (build/test/fuzz_glibc).
 *
 * FUZZ_PLANT chooses the bug; without it the shim passes every call on:
 *   flip      every 5000th realloc flips a byte of the contents it kept
 *   nozero    every 2000th calloc leaves a byte of its block set
 *   misalign  every 500th aligned allocation above 16 bytes of alignment
 *             returns a pointer 16 bytes past an aligned block
 *   twice     every 5000th malloc returns the block the previous malloc
 *             returned, while it is live */
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);

enum { NONE, FLIP, NOZERO, MISALIGN, TWICE };
static int plant;
static unsigned long calls;   /* the fuzzer's counts are per thread; a rough count serves */
static void *last;

__attribute__((constructor)) static void choose(void) {
  const char *v = getenv("FUZZ_PLANT");
  if (!v) return;
  plant = !strcmp(v, "flip") ? FLIP : !strcmp(v, "nozero") ? NOZERO : !strcmp(v, "misalign") ? MISALIGN
        : !strcmp(v, "twice")  ? TWICE : NONE;
}

static int due(int bug, unsigned long every) {
  return plant == bug && __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) % every == 0;
}

static void forget(void *p) { __atomic_compare_exchange_n(&last, &p, NULL, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); }

void *malloc(size_t size) {
  void *l = __atomic_load_n(&last, __ATOMIC_RELAXED);
  if (l && size && size <= malloc_usable_size(l) && due(TWICE, 5000)) return l;
  void *p = __libc_malloc(size);
  if (plant == TWICE) __atomic_store_n(&last, p, __ATOMIC_RELAXED);
  return p;
}

void free(void *p) {
  forget(p);
  __libc_free(p);
}

void *calloc(size_t count, size_t size) {
  unsigned char *p = __libc_calloc(count, size);
  if (p && count && size && due(NOZERO, 2000)) p[0] = 0x5a;
  return p;
}

void *realloc(void *p, size_t size) {
  forget(p);
  unsigned char *q = __libc_realloc(p, size);
  if (q && p && size && due(FLIP, 5000)) q[0] ^= 0x20;
  return q;
}

static void *aligned(size_t align, size_t size) {
  if (align > 16 && due(MISALIGN, 500)) {
    char *p = __libc_memalign(align, size + 16);
    return p ? p + 16 : NULL;
  }
  return __libc_memalign(align, size);
}

static int pow2(size_t x) { return x && !(x & (x - 1)); }

int posix_memalign(void **out, size_t align, size_t size) {
  if (!pow2(align) || align % sizeof(void *)) return EINVAL;
  void *p = aligned(align, size);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

/* glibc 2.38's check, which older ones lack */
void *aligned_alloc(size_t align, size_t size) {
  if (!pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned(align, size);
}

void *memalign(size_t align, size_t size) { return aligned(align, size); }
