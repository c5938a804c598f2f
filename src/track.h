/* What a memory checker is told. In a `make VALGRIND=1` build (HAK_VALGRIND)
 * Valgrind's memcheck sees hakmem's blocks as heap blocks, as it sees
 * glibc's, and everything else hakmem maps as no-access:
 *   - every mapping of the OS layer starts no-access (HAK_TRACK_MAPPED);
 *   - a block handed to the program is announced with its requested size
 *     (MALLOCLIKE: addressable, undefined unless zeroed), a freed one is
 *     withdrawn before hakmem takes it back (FREELIKE: no-access, and
 *     memcheck remembers where it was freed);
 *   - hakmem's own code, which reads and writes its metadata and the links
 *     in free blocks, runs with error reporting off (HAK_TRACK_ENTER /
 *     HAK_TRACK_LEAVE, which nest): at every entry point (the malloc
 *     family, the hak_* API, initialisation, the thread-exit hook, the
 *     at-exit report) and for the whole life of the purger thread.
 * So memcheck reports the program's invalid reads and writes, its
 * use-after-free and its leaks as it would under glibc. In every other
 * build these are empty and the code is the same instruction for
 * instruction. */
#ifndef HAK_TRACK_H
#define HAK_TRACK_H

#ifndef HAK_VALGRIND
#define HAK_VALGRIND 0
#endif

/* Under memcheck, in a build it cannot see: one warning naming the one it
 * can (track.c; at start-up). */
void hak_track_checker_hint(void);
#ifndef HAK_ASAN
#define HAK_ASAN 0
#endif

#if HAK_VALGRIND
#include <valgrind/memcheck.h>
#define HAK_TRACK_ENTER() VALGRIND_DISABLE_ERROR_REPORTING
#define HAK_TRACK_LEAVE() VALGRIND_ENABLE_ERROR_REPORTING
#define HAK_TRACK_MAPPED(p, n) VALGRIND_MAKE_MEM_NOACCESS((p), (n))
#define HAK_TRACK_ALLOC(p, n, zeroed)                           \
  do {                                                          \
    if (p) VALGRIND_MALLOCLIKE_BLOCK((p), (n), 0, (zeroed));    \
  } while (0)
#define HAK_TRACK_FREE(p)                                       \
  do {                                                          \
    if (p) VALGRIND_FREELIKE_BLOCK((p), 0);                     \
  } while (0)
/* The first n bytes of a moved or resized block hold what the old one did. */
#define HAK_TRACK_DEFINED(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#elif HAK_ASAN
/* The AddressSanitizer-aware build (make ASAN=1): hakmem itself is not
 * instrumented; a block's bytes past its requested size and every freed
 * block are poisoned, so that the program's instrumented code reports
 * touching them (as use-after-poison). track.c. */
void hak_track_asan_alloc(void *p, size_t n);
void hak_track_asan_free(void *p);
/* Zeroing and copying of blocks by hakmem itself, past the sanitizer's
 * interceptors of memset and memcpy, which would check the poison. */
void hak_block_zero(void *p, size_t n);
void hak_block_copy(void *to, const void *from, size_t n);
/* The sanitizer's interceptors of strdup, getcwd and the like allocate from
 * its own heap: free, realloc and malloc_usable_size of such a block go
 * back to it (true: p was one, and it was dealt with). */
bool hak_track_foreign_free(void *p);
bool hak_track_foreign_realloc(void *p, size_t n, void **out);
bool hak_track_foreign_usable(const void *p, size_t *out);
#define HAK_TRACK_FOREIGN_FREE(p) hak_track_foreign_free(p)
#define HAK_TRACK_FOREIGN_REALLOC(p, n, out) hak_track_foreign_realloc((p), (n), (out))
#define HAK_TRACK_FOREIGN_USABLE(p, out) hak_track_foreign_usable((p), (out))
#define HAK_TRACK_ENTER() ((void)0)
#define HAK_TRACK_LEAVE() ((void)0)
#define HAK_TRACK_MAPPED(p, n) ((void)0)
#define HAK_TRACK_ALLOC(p, n, zeroed) hak_track_asan_alloc((p), (n))
#define HAK_TRACK_FREE(p) hak_track_asan_free(p)
#define HAK_TRACK_DEFINED(p, n) ((void)0)
#else
#define HAK_TRACK_ENTER() ((void)0)
#define HAK_TRACK_LEAVE() ((void)0)
#define HAK_TRACK_MAPPED(p, n) ((void)0)
#define HAK_TRACK_ALLOC(p, n, zeroed) ((void)0)
#define HAK_TRACK_FREE(p) ((void)0)
#define HAK_TRACK_DEFINED(p, n) ((void)0)
#endif

#if !HAK_ASAN
#define hak_block_zero(p, n) memset((p), 0, (n))
#define hak_block_copy(to, from, n) memcpy((to), (from), (n))
#define HAK_TRACK_FOREIGN_FREE(p) false
#define HAK_TRACK_FOREIGN_REALLOC(p, n, out) false
#define HAK_TRACK_FOREIGN_USABLE(p, out) false
#endif

#endif
