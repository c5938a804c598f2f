/* What memory checkers are told (track.h): the AddressSanitizer-aware
 * build's poisoning, and a word to whoever runs memcheck on a build it
 * cannot see. */
#include "fast_path.h"

/* memcheck (its preload, vgpreload_memcheck, is in LD_PRELOAD) replaces
 * libc's malloc, not hakmem's, and sees none of this build's blocks: its
 * summary says "0 allocs, 0 frees" and it finds no leak. Say once which
 * build it sees: the Valgrind-aware one beside this library (make install
 * puts it in <libdir>/hakmem/valgrind, make valgrind in build/valgrind), or
 * for a program that links hakmem statically, its libhakmem.a. */
#define STR_(x) #x
#define STR(x) STR_(x)
void hak_track_checker_hint(void) {
  if (HAK_VALGRIND) return;
  const char *preload = NULL;
  for (char **e = hak_os_environ(); e && *e; e++)
    if (!strncmp(*e, "LD_PRELOAD=", 11)) preload = *e + 11;
  if (!preload || !strstr(preload, "vgpreload_memcheck")) return;
  static const char beside[][32] = {"hakmem/valgrind/libhakmem.so." STR(HAKMEM_VERSION_MAJOR),
                                     "valgrind/libhakmem.so." STR(HAKMEM_VERSION_MAJOR)};
  char path[4096];
  bool shared = hak_os_own_library(path, sizeof path - sizeof beside[0]), found = false;
  char *slash = shared ? strrchr(path, '/') : NULL;
  for (size_t i = 0; slash && !found && i < 2; i++) {
    strcpy(slash + 1, beside[i]);
    found = hak_os_readable(path);
  }
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "hakmem: warning: memcheck sees no block of this build of hakmem; ");
  if (!shared) {
    hak_out_str(&o, "link the program with the Valgrind-aware libhakmem.a (make valgrind: build/valgrind/; "
                    "make install: hakmem/valgrind/ in the library directory)");
  } else {
    hak_out_str(&o, "preload ");
    hak_out_str(&o, found ? path : "the Valgrind-aware build (make valgrind)");
    hak_out_str(&o, " and run valgrind with --soname-synonyms=somalloc=nouserintercepts");
  }
  hak_out_str(&o, " (docs/checkers.md)\n");
  hak_out_flush(&o);
}

#if HAK_ASAN
#include <sanitizer/asan_interface.h>

/* The sanitizer's allocator (libasan; GCC ships no header for these). */
extern int __sanitizer_get_ownership(const volatile void *p);
extern size_t __sanitizer_get_allocated_size(const volatile void *p);
extern void __interceptor_free(void *p);

/* The sanitizer allocates through hakmem while it sets itself up, before
 * its shadow memory exists and before the C library has the environment;
 * by the program's constructors both are there. So blocks handed out before
 * are not poisoned (they are, once freed), and the options are read again
 * here. */
static bool ready;
__attribute__((constructor)) static void sanitizer_ready(void) {
  hak_options_init();
  hak_ace_restart();
  if (hak_opt(hak_option_route_banner)) hak_banner_print();
  ready = true;
}

void hak_track_asan_alloc(void *p, size_t n) {
  if (!p || !ready) return;
  size_t usable = hak_block_live_usable(p, "malloc");
  __asan_unpoison_memory_region(p, n);
  if (usable > n) __asan_poison_memory_region((char *)p + n, usable - n);
}

/* Plain loops, which the compiler must not turn back into calls. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void hak_block_zero(void *p, size_t n) {
  for (unsigned char *c = p; n--;) *c++ = 0;
}

__attribute__((optimize("no-tree-loop-distribute-patterns"))) void hak_block_copy(void *to, const void *from, size_t n) {
  unsigned char *d = to;
  for (const unsigned char *s = from; n--;) *d++ = *s++;
}

void hak_track_asan_free(void *p) {
  size_t usable = p && ready ? hak_block_live_usable(p, "free") : 0;  /* 0: free says what is wrong */
  if (usable) __asan_poison_memory_region(p, usable);
}
/* A block of the sanitizer's heap, not hakmem's. */
static bool sanitizer_owns(const void *p) {
  return p && hak_registry_kind((uintptr_t)p) == HAK_REG_FOREIGN && __sanitizer_get_ownership(p);
}

bool hak_track_foreign_free(void *p) {
  if (!sanitizer_owns(p)) return false;
  __interceptor_free(p);
  return true;
}

/* The block moves into hakmem. */
bool hak_track_foreign_realloc(void *p, size_t n, void **out) {
  if (!sanitizer_owns(p)) return false;
  size_t old = __sanitizer_get_allocated_size(p);
  void *q = hak_malloc_entry_of(hak_prof_on, n);
  if (q) {
    hak_block_copy(q, p, old < n ? old : n);
    __interceptor_free(p);
  }
  *out = q;
  return true;
}

bool hak_track_foreign_usable(const void *p, size_t *out) {
  if (!sanitizer_owns(p)) return false;
  *out = __sanitizer_get_allocated_size(p);
  return true;
}
#endif
