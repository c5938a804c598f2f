/* Invalid frees and reallocs must abort with a one-line diagnostic.
 *
 * Each case runs in a forked child whose stderr goes into a pipe; the child
 * first sends the bad pointer through a second pipe, then performs the bad
 * operation. The parent checks that the child died of SIGABRT and printed
 * exactly one line containing the expected text followed by the pointer as
 * %p formats it. */
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "internal.h"
#include "check.h"

#define INVALID_FREE "hakmem: free(): invalid pointer "
#define INVALID_REALLOC "hakmem: realloc(): invalid pointer "
#define INVALID_USABLE "hakmem: malloc_usable_size(): invalid pointer "
#define DOUBLE_FREE "hakmem: free(): double free of "
#define FREED_REALLOC "hakmem: realloc(): use after free of "
#define FREED_USABLE "hakmem: malloc_usable_size(): use after free of "

static int ptr_fd = -1;
static char global_buf[64];

/* Hides where a pointer comes from, so that the compiler neither warns
 * about nor optimizes the invalid operations. */
static void *opaque(void *p) {
  void *volatile v = p;
  return v;
}

static void report(void *p) {
  uintptr_t v = (uintptr_t)p;
  if (write(ptr_fd, &v, sizeof v) != (ssize_t)sizeof v) _exit(3);
}

static void free_stack(void) {
  char buf[64];
  void *p = opaque(buf);
  report(p);
  T_free(p);
}

static void free_global(void) {
  void *p = opaque(global_buf);
  report(p);
  T_free(p);
}

static void free_interior(void) {
  char *p = T_malloc(64);
  report(p + 16);
  T_free(opaque(p + 16));
}

static void free_large_middle(void) {
  char *p = T_malloc(1 << 20);
  report(p + (1 << 19));
  T_free(opaque(p + (1 << 19)));
}

/* An address in the arena where no SuperSlab has been carved yet: free reads
 * zeroed descriptors there and must still reject it. */
static void free_arena_unused(void) {
  void *first = T_malloc(16);
  opaque(first);
  uintptr_t ss = hak_arena_base + hak_arena_size - HAK_SS_SIZE;   /* the secure build may have used it */
  while (hak_arena_size && hak_registry_kind(ss) != HAK_REG_FOREIGN) ss -= HAK_SS_SIZE;
  char *p = hak_arena_size ? (char *)(ss + HAK_SS_HEADER) : global_buf;
  report(p);
  T_free(opaque(p));
}

static void realloc_stack(void) {
  char buf[64];
  void *p = opaque(buf);
  report(p);
  opaque(T_realloc(p, 100));
}

static void usable_size_stack(void) {
  char buf[64];
  void *p = opaque(buf);
  report(p);
  volatile size_t n = T_usable_size(p);
  (void)n;
}

static void double_free(size_t size) {
  void *p = T_malloc(size), *again = opaque(p);
  report(p);
  T_free(p);
  T_free(again);
}

static void double_free_tiny(void) { double_free(32); }

static void double_free_mid(void) { double_free(8000); }

static void *free_in_thread(void *p) {
  T_free(p);
  return NULL;
}

static void double_free_remote(void) {
  void *p = T_malloc(64), *again = opaque(p);
  report(p);
  pthread_t t;
  if (pthread_create(&t, NULL, free_in_thread, p) != 0) _exit(4);
  pthread_join(t, NULL);
  T_free(again);
}

/* Frees a block a second time after another allocation of its size class
 * was served in between. Two blocks are freed so that whichever one the
 * allocation reuses, the other is still free and not handed out again. */
static void double_free_after_reuse(void) {
  void *a = T_malloc(48), *c = T_malloc(48);
  T_free(a);
  T_free(c);
  void *b = T_malloc(48);
  void *victim = b == a ? c : a;
  report(victim);
  T_free(opaque(victim));
}

/* The first block of p's slab that has never been handed out (p must be
 * the newest block of a slab with uncarved room). */
static char *first_uncarved(void *p) {
  uintptr_t a = (uintptr_t)p;
  hak_slab_t *s = hak_slab_of(hak_ss_of(p), a);
  if (s->carved >= s->capacity) _exit(5);
  return (char *)s->start + (size_t)s->carved * hak_class_size[s->cls];
}

/* A block start beyond what the slab has carved: no cache ever held it. */
static void free_uncarved(size_t size) {
  char *q = first_uncarved(T_malloc(size));
  report(q);
  T_free(opaque(q));
}

static void free_uncarved_tiny(void) { free_uncarved(400); }

static void free_uncarved_mid(void) { free_uncarved(20000); }

static void realloc_uncarved(void) {
  char *q = first_uncarved(T_malloc(400));
  report(q);
  opaque(T_realloc(opaque(q), 10));
}

/* Frees p, then empties its slab and decommits it with a trim, while a
 * block of another class keeps the SuperSlab in the heap. */
static void *freed_and_purged(size_t size) {
  opaque(T_malloc(32));
  void *p = T_malloc(size), *again = opaque(p);
  T_free(p);
  T_trim();
  return again;
}

static void double_free_purged_tiny(void) {
  void *p = freed_and_purged(176);
  report(p);
  T_free(opaque(p));
}

static void double_free_purged_mid(void) {
  void *p = freed_and_purged(12000);
  report(p);
  T_free(opaque(p));
}

/* Two blocks of 4 KiB next to each other in a fully carved slab, freed
 * and their pages given back by a trim while other blocks of the slab stay
 * in use (slab_list.c, "Pages of slabs in use"): absent, their free marks
 * gone with their pages. run[0] is the first, run[1] a block of the slab
 * in use; NULL if none such. */
static char **holed_slab(void) {
  enum { N = 64, SIZE = 4096 };
  static char *b[N], *run[2];
  for (int i = 0; i < N; i++) b[i] = T_malloc(SIZE);
  for (int i = 0; i < N; i++) {
    hak_slab_t *u = hak_unit_of(hak_ss_of(b[i]), (uintptr_t)b[i]), *s = hak_slab_of(hak_ss_of(b[i]), (uintptr_t)b[i]);
    int next = -1, other = -1;
    for (int k = 0; k < N; k++) {
      if (b[k] == b[i] + SIZE) next = k;
      else if (k != i && hak_ss_of(b[k]) == hak_ss_of(b[i]) && hak_unit_of(hak_ss_of(b[k]), (uintptr_t)b[k]) == u) other = k;
    }
    if (s->carved < s->capacity || next < 0 || other < 0) continue;
    run[0] = b[i];
    run[1] = b[other];
    T_free(opaque(b[i]));
    T_free(opaque(b[next]));
    T_trim();
    return hak_slab_holed_block(u, (uintptr_t)run[0]) == HAK_BLOCK_ABSENT ? run : NULL;
  }
  return NULL;
}

static void double_free_absent(void) {
  char **run = holed_slab();
  if (!run) _exit(4);
  report(run[0]);
  T_free(opaque(run[0]));
}

static void double_free_holed(void) {
  char **run = holed_slab();
  if (!run) _exit(4);
  T_free(run[1]);
  report(run[1]);
  T_free(opaque(run[1]));
}

static void realloc_freed_purged(void) {
  void *p = freed_and_purged(176);
  report(p);
  opaque(T_realloc(opaque(p), 300));
}

/* The case of issue 45: a block freed, 4000 of its size allocated and
 * freed (the first of them at its address), its slab emptied, decommitted
 * and its SuperSlab given back by a trim, then the block freed again.
 * With a second thread alive the background purger runs, and the block's
 * heap is drained and swept while its thread sleeps, before the trim
 * (a hakmem whose purger ran in a program with one thread handed the
 * block's address out again and took the second free: exit 0). */
static void *sleeper(void *arg) {
  usleep(3000000);
  return arg;
}

static void double_free_trimmed(bool threads) {
  pthread_t t;
  if (threads && pthread_create(&t, NULL, sleeper, NULL) != 0) _exit(4);
  void *p = T_malloc(24), *again = opaque(p);
  T_free(p);
  static void *v[4000];
  for (int i = 0; i < 4000; i++) v[i] = T_malloc(24);
  for (int i = 0; i < 4000; i++) T_free(v[i]);
  if (threads) usleep(1500000);
  T_trim();
  report(again);
  T_free(again);
}

static void double_free_trimmed_alone(void) { double_free_trimmed(false); }

static void double_free_trimmed_threads(void) { double_free_trimmed(true); }

static void realloc_freed(size_t size) {
  void *p = T_malloc(size), *again = opaque(p);
  T_free(p);
  report(again);
  opaque(T_realloc(again, size / 2));
}

static void realloc_freed_tiny(void) { realloc_freed(96); }

static void realloc_freed_mid(void) { realloc_freed(5000); }

static void realloc_freed_large(void) { realloc_freed(1 << 20); }

static void usable_size_freed(void) {
  void *p = T_malloc(96), *again = opaque(p);
  T_free(p);
  report(again);
  volatile size_t n = T_usable_size(again);
  (void)n;
}

#if HAK_SECURE
/* ---- the secure build's checks of free blocks (docs/secure.md): each of
 * these corrupts a free block, which the default build would hand out or
 * follow silently */
#define CORRUPTED "hakmem: malloc(): corrupted free block (written after free, or overflowed into) "

/* A write into a freed block's first word, while it waits in the cache. */
static void uaf_write_cached(void) {
  uintptr_t *p = T_malloc(48), *again = opaque(p);
  report(p);
  T_free(p);
  ((volatile uintptr_t *)again)[0] = 0x4141414141414141u;
  opaque(T_malloc(48));
}

/* A free of a block a refill carved that waits in the cache, never handed
 * out: the secure build marks such blocks (the default build writes
 * nothing into them, README "Limits"), and takes it for a double free. */
static void free_cached_unallocated(void) {
  opaque(T_malloc(400));
  hak_ucache_t *c = &hak_heap_get()->cache[hak_class_of(400)];
  if (c->top == c->items) _exit(5);
  void *q = c->top[-1];
  report(q);
  T_free(opaque(q));
}

/* A write that clears a freed block's mark. */
static void uaf_write_mark(void) {
  uintptr_t *p = T_malloc(64), *again = opaque(p);
  report(p);
  T_free(p);
  ((volatile uintptr_t *)again)[1] = 0;
  opaque(T_malloc(64));
}

/* An overflow of one block into the next one, which is free. */
static void overflow_into_free(void) {
  enum { N = 64 };
  char *p[N];
  for (int i = 0; i < N; i++) p[i] = T_malloc(32);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      if (p[j] == p[i] + 32) {
        report(p[j]);
        T_free(p[j]);
        memset(opaque(p[i]), 'A', 40);   /* 8 bytes past the end */
        opaque(T_malloc(32));
        return;
      }
  _exit(6);
}

/* A freed block's link on its slab's free list replaced by the address of
 * a live block of the same slab: the plausible pointer a use after free
 * would plant to get that block handed out twice. */
static void uaf_write_list_link(void) {
  void *keep, *p[300];
  if (!freed_to_slab_lists(&keep, p, 300, 80)) _exit(6);
  report(p[0]);
  *(void *volatile *)opaque(p[0]) = keep;
  for (int i = 0; i < 300; i++) opaque(T_malloc(80));
  _exit(6);
}

/* A container of a slab's free list (cache.c): the first address it lists
 * replaced by a live block's, encoded as the list encodes it. */
static void uaf_write_list_container(void) {
  void *keep, *p[300];
  if (!freed_to_slab_lists(&keep, p, 300, 80)) _exit(6);
  void **c = hak_slab_of(hak_ss_of(keep), (uintptr_t)keep)->free;
  while (c && !(uintptr_t)c[2]) c = hak_link_decode((uintptr_t)c[0], c);
  if (!c) _exit(6);
  report(c);
  ((void *volatile *)c)[3] = (void *)hak_link_encode(keep, &c[3]);
  for (int i = 0; i < 300; i++) opaque(T_malloc(80));
  _exit(6);
}

/* A remote free's batch: its container's first listed address replaced by
 * a live block's. */
static void *free_all_in_thread(void *arg) {
  void **p = arg;
  for (int i = 0; i < 8; i++) T_free(p[i]);
  return NULL;
}

static void uaf_write_remote_batch(void) {
  void *keep = T_malloc(64), *p[8];
  for (int i = 0; i < 8; i++) p[i] = T_malloc(64);
  pthread_t t;
  if (pthread_create(&t, NULL, free_all_in_thread, p) != 0) _exit(4);
  pthread_join(t, NULL);   /* the thread's exit sent the batch: p[0] holds the others */
  report(p[0]);
  ((void *volatile *)opaque(p[0]))[3] = keep;
  for (int i = 0; i < 100000; i++) opaque(T_malloc(64));
  _exit(6);
}
#endif

struct invalid_case {
  const char *name;
  const char *expect;
  void (*op)(void);
};

static const struct invalid_case cases[] = {
    {"free of a stack address", INVALID_FREE, free_stack},
    {"free of a global", INVALID_FREE, free_global},
    {"free of an interior pointer", INVALID_FREE, free_interior},
    {"free inside a large block", INVALID_FREE, free_large_middle},
    {"free in the arena where no SuperSlab is", INVALID_FREE, free_arena_unused},
    {"realloc of a stack address", INVALID_REALLOC, realloc_stack},
    {"usable size of a stack address", INVALID_USABLE, usable_size_stack},
    {"double free of a tiny block", DOUBLE_FREE, double_free_tiny},
    {"double free of a mid block", DOUBLE_FREE, double_free_mid},
    {"double free after a remote free", DOUBLE_FREE, double_free_remote},
    {"double free after reuse", DOUBLE_FREE, double_free_after_reuse},
    {"free of a tiny block never handed out", INVALID_FREE, free_uncarved_tiny},
    {"free of a mid block never handed out", INVALID_FREE, free_uncarved_mid},
    {"realloc of a block never handed out", INVALID_REALLOC, realloc_uncarved},
    {"double free of a tiny block after its slab was purged", DOUBLE_FREE, double_free_purged_tiny},
    {"double free of a mid block after its slab was purged", DOUBLE_FREE, double_free_purged_mid},
    {"realloc of a freed block after its slab was purged", FREED_REALLOC, realloc_freed_purged},
    {"double free of a block whose page went back, its slab in use", DOUBLE_FREE, double_free_absent},
    {"double free of a block of a slab that gave pages back", DOUBLE_FREE, double_free_holed},
    {"double free after 4000 blocks of its size and a trim", DOUBLE_FREE, double_free_trimmed_alone},
    {"double free after 4000 blocks of its size, a sleep and a trim, two threads", DOUBLE_FREE,
     double_free_trimmed_threads},
    {"realloc of a freed tiny block", FREED_REALLOC, realloc_freed_tiny},
    {"realloc of a freed mid block", FREED_REALLOC, realloc_freed_mid},
    {"realloc of a freed large block", FREED_REALLOC, realloc_freed_large},
    {"usable size of a freed block", FREED_USABLE, usable_size_freed},
#if HAK_SECURE
    {"free of a block a refill carved, never handed out", DOUBLE_FREE, free_cached_unallocated},
    {"use after free: a write into a cached block", CORRUPTED, uaf_write_cached},
    {"use after free: a write over the free mark", CORRUPTED, uaf_write_mark},
    {"overflow into the next block, free", CORRUPTED, overflow_into_free},
    {"use after free: a free-list link made a live block's address", CORRUPTED, uaf_write_list_link},
    {"use after free: a free-list container made to list a live block", CORRUPTED, uaf_write_list_container},
    {"use after free: a remote-free batch made to list a live block", CORRUPTED, uaf_write_remote_batch},
#endif
};

static size_t read_all(int fd, char *buf, size_t cap) {
  size_t len = 0;
  ssize_t n;
  while (len < cap && (n = read(fd, buf + len, cap - len)) > 0) len += (size_t)n;
  return len;
}

/* The child's output on one line, newlines shown as \n. */
static void escape_newlines(const char *s, char *buf, size_t cap) {
  size_t n = 0;
  for (; *s && n + 3 < cap; s++) {
    if (*s == '\n') {
      buf[n++] = '\\';
      buf[n++] = 'n';
    } else {
      buf[n++] = *s;
    }
  }
  buf[n] = '\0';
}

static void run_case(const struct invalid_case *c) {
  int err[2], ptr[2];
  if (pipe(err) || pipe(ptr)) {
    CHECK(0, "%s: pipe failed", c->name);
    return;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    close(err[0]);
    close(ptr[0]);
    dup2(err[1], 2);
    close(err[1]);
    ptr_fd = ptr[1];
    c->op();
    _exit(0);
  }
  close(err[1]);
  close(ptr[1]);
  CHECK(pid > 0, "%s: fork failed", c->name);
  if (pid < 0) {
    close(err[0]);
    close(ptr[0]);
    return;
  }

  char out[4096];
  size_t len = read_all(err[0], out, sizeof out - 1);
  out[len] = '\0';
  uintptr_t bad = 0;
  size_t got = read_all(ptr[0], (char *)&bad, sizeof bad);
  close(err[0]);
  close(ptr[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  char shown[2 * sizeof out];
  escape_newlines(out, shown, sizeof shown);

  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
        "%s: child %s %d, stderr: %s", c->name,
        WIFSIGNALED(status) ? "died of signal" : "exited with",
        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), shown);
  CHECK(got == sizeof bad, "%s: child did not report its pointer", c->name);

  char expect[256];
  snprintf(expect, sizeof expect, "%s%p", c->expect, (void *)bad);
  const char *at = strstr(out, expect);
  CHECK(at && !isxdigit((unsigned char)at[strlen(expect)]),
        "%s: expected \"%s\", got \"%s\"", c->name, expect, shown);
  CHECK(len > 0 && out[len - 1] == '\n' && strchr(out, '\n') == out + len - 1,
        "%s: message is not exactly one line: \"%s\"", c->name, shown);
}

int main(int argc, char **argv) {
  int status = cases_from_args(argc, argv, cases, sizeof cases / sizeof cases[0], sizeof cases[0]);
  if (status >= 0) return status;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (case_chosen(cases[i].name)) run_case(&cases[i]);
  return test_done("invalid");
}
