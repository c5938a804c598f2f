/* The secure build's own protections (docs/secure.md), each shown working:
 * guard pages after a SuperSlab's header, at its end and after large
 * blocks fault on access; fresh blocks come in random order; SuperSlabs
 * land at random places of the arena; free-list links are not addresses;
 * the banner says "secure". Corrupted free blocks are test_invalid's secure
 * cases. Built only against the secure library (-DHAK_SECURE=1). */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "internal.h"
#include "check.h"

#if !HAK_SECURE
#error "test_secure is built against the secure library only"
#endif

static void *opaque(void *p) {
  void *volatile v = p;
  return v;
}

/* Runs fn(arg) in a forked child; true if the child died of SIGSEGV (or
 * SIGBUS) and had printed nothing. */
static bool faults(void (*fn)(char *), char *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    fn(arg);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS);
}

static void write_byte(char *p) { *(volatile char *)p = 1; }
static void read_byte(char *p) { (void)*(volatile char *)p; }

static void test_superslab_guards(void) {
  char *p = T_malloc(32);
  char *ss = (char *)((uintptr_t)p & ~(uintptr_t)HAK_SS_MASK);
  CHECK(faults(write_byte, ss + 4096), "no guard page after the SuperSlab header at %p", (void *)ss);
  CHECK(faults(read_byte, ss + HAK_SS_HEADER - 1), "the guard page after the header is readable");
  CHECK(faults(write_byte, ss + HAK_SS_SIZE - 1), "no guard page at the end of the SuperSlab at %p", (void *)ss);
  CHECK(!faults(write_byte, ss + HAK_SS_HEADER), "the first block page of unit 0 faults");
  CHECK(!faults(read_byte, ss), "the header page faults");
  /* the last unit's slab ends before the guard: a mid class that fills the
   * SuperSlab's units gets blocks up to it, and none of them reaches in */
  void *blocks[200];
  size_t n = 0;
  for (; n < 200; n++) {
    blocks[n] = T_malloc(96 * 1024);
    memset(blocks[n], 0x5a, 96 * 1024);   /* faults if a block overlapped a guard */
  }
    for (size_t i = 0; i < n; i++) T_free(blocks[i]);
  T_free(p);
}

static void test_large_guards(void) {
  size_t sizes[] = {200 * 1024, 1 << 20, (5 << 20) + 123};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char *p = T_malloc(sizes[i]);
    size_t n = T_usable_size(p);
    memset(p, 1, n);
    CHECK(faults(write_byte, p + n), "no guard page after a large block of %zu bytes (usable %zu)", sizes[i], n);
    T_free(p);
    /* the same mapping again, from the BigCache: its guard is still there */
    char *q = T_malloc(sizes[i]);
    size_t m = T_usable_size(q);
    memset(q, 2, m);
    CHECK(faults(write_byte, q + m), "no guard page after a reused large block of %zu bytes", sizes[i]);
    T_free(q);
  }
  char *a = T_aligned_alloc(4 << 20, 3 << 20);
  size_t n = T_usable_size(a);
  memset(a, 3, n);
  CHECK(((uintptr_t)a & ((4 << 20) - 1)) == 0, "4 MiB alignment");
  CHECK(faults(write_byte, a + n), "no guard page after a 4 MiB-aligned block");
  T_free(a);
  /* realloc of a large block keeps a guard after the block it returns */
  char *r = T_malloc(300 * 1024);
  memset(r, 4, 300 * 1024);
  for (size_t size = 400 * 1024; size <= (8u << 20); size *= 2) {
    r = T_realloc(r, size);
    CHECK(r && r[300 * 1024 - 1] == 4, "realloc to %zu kept the contents", size);
    CHECK(faults(write_byte, r + T_usable_size(r)), "no guard page after a large block grown to %zu", size);
  }
  r = T_realloc(r, 250 * 1024);
  CHECK(r[250 * 1024 - 1] == 4 && faults(write_byte, r + T_usable_size(r)), "guard after a shrunk block");
  T_free(r);
  /* a BigCache entry cut for a smaller block: the block gets a guard page
   * after it, the rest (an entry of its own, reused next) keeps the old */
  char *big = T_malloc(8u << 20);
  uintptr_t big_at = (uintptr_t)big, big_end = big_at + T_usable_size(big);
  __asm__("" : "+r"(big_at), "+r"(big_end));   /* addresses compared after the free, not the pointer */
  T_free(big);
  char *head = T_malloc(1u << 20);
  size_t hn = T_usable_size(head);
  memset(head, 5, hn);
  CHECK(((uintptr_t)head & ~(uintptr_t)HAK_SS_MASK) == (big_at & ~(uintptr_t)HAK_SS_MASK),
        "the 1 MiB block %p is not the head of the cached 8 MiB one", (void *)head);
  CHECK(faults(write_byte, head + hn), "no guard page after a block cut from a BigCache entry");
  char *rest = T_malloc(4u << 20);
  size_t rn = T_usable_size(rest);
  memset(rest, 6, rn);
  CHECK(rest > head + hn && (uintptr_t)rest + rn <= big_end, "the 4 MiB block %p is not the rest of the 8 MiB one", (void *)rest);
  CHECK(faults(write_byte, rest + rn), "no guard page after the rest of a cut BigCache entry");
  CHECK(head[hn - 1] == 5, "the cut block's last byte changed");
  T_free(rest);
  T_free(head);
}

/* The offsets from the slab start, in blocks, of the first 48 blocks of
 * 48 bytes a new thread's heap hands out. */
struct order {
  long index[48];
};

static void *fresh_order(void *arg) {
  struct order *o = arg;
  void *p[48];
  for (int i = 0; i < 48; i++) p[i] = T_malloc(48);
  hak_slab_t *s = hak_slab_of(hak_ss_of(p[0]), (uintptr_t)p[0]);
  for (int i = 0; i < 48; i++) o->index[i] = (long)(((uintptr_t)p[i] - s->start) / 48);
  for (int i = 0; i < 48; i++) T_free(p[i]);
  return NULL;
}

static void test_fresh_order(void) {
  struct order a, b;
  pthread_t t;
  pthread_create(&t, NULL, fresh_order, &a);
  pthread_join(t, NULL);
  /* the second thread adopts the first one's heap, whose slab emptied
   * and is carved again; the heap's random numbers have moved on */
  pthread_create(&t, NULL, fresh_order, &b);
  pthread_join(t, NULL);
  int ascending = 0, same = 0;
  for (int i = 1; i < 48; i++) ascending += a.index[i] == a.index[i - 1] + 1;
  for (int i = 0; i < 48; i++) same += a.index[i] == b.index[i];
  CHECK(ascending < 24, "fresh blocks come in address order: %d of 47 steps are +1 block", ascending);
  CHECK(same < 24, "two heaps hand out fresh blocks in the same order (%d of 48 equal)", same);
}

static pthread_barrier_t placed;

static void *superslab_of_thread(void *arg) {
  void *p = T_malloc(64);
  *(uintptr_t *)arg = (uintptr_t)p & ~(uintptr_t)HAK_SS_MASK;
  pthread_barrier_wait(&placed);   /* every thread holds its heap, so none is adopted */
  T_free(p);
  return NULL;
}

static void test_superslab_placement(void) {
  enum { THREADS = 8 };
  if (!hak_arena_size) return;
  uintptr_t ss[THREADS];
  pthread_t t[THREADS];
  pthread_barrier_init(&placed, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, superslab_of_thread, &ss[i]);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&placed);
  uintptr_t lo = ss[0], hi = ss[0];
  for (int i = 1; i < THREADS; i++) {
    lo = ss[i] < lo ? ss[i] : lo;
    hi = ss[i] > hi ? ss[i] : hi;
  }
  /* 8 slots of 8192 taken in order would lie within 8 slots */
  CHECK((hi - lo) >> HAK_SS_SHIFT >= 64, "8 threads' SuperSlabs lie within %zu slots",
        (size_t)((hi - lo) >> HAK_SS_SHIFT));
}

/* Freed blocks on a slab's free list hold no address of their slab: not
 * in their link, nor (a container, cache.c) in the addresses they list. */
static void test_encoded_links(void) {
  void *keep, *p[300];
  int listed = freed_to_slab_lists(&keep, p, 300, 80), raw = 0, addresses = 0, raw_addresses = 0;
  uintptr_t ss = (uintptr_t)keep & ~(uintptr_t)HAK_SS_MASK;
  for (int i = 0; i < listed; i++) {
    uintptr_t w = *(volatile uintptr_t *)opaque(p[i]);
    raw += w - ss < HAK_SS_SIZE || w == 0;
  }
  for (void **c = hak_slab_of(hak_ss_of(keep), (uintptr_t)keep)->free; c; c = hak_link_decode((uintptr_t)c[0], c))
    for (uintptr_t k = 0; k < (uintptr_t)c[2]; k++, addresses++) raw_addresses += (uintptr_t)c[3 + k] - ss < HAK_SS_SIZE;
  CHECK(listed > 0, "no freed block in the kept block's SuperSlab");
  CHECK(raw <= 1, "%d of %d free-list links are plain addresses or NULL", raw, listed);
  CHECK(addresses > listed / 2, "the free list's containers list %d of %d blocks", addresses, listed);
  CHECK(raw_addresses == 0, "%d of %d addresses listed are plain", raw_addresses, addresses);
  T_free(keep);
}

static void test_banner(void) {
  const char *env[] = {"HAKMEM_ROUTE_BANNER=1", NULL};
  char out[256], err[4096];
  run_self(env, out, sizeof out, err, sizeof err);
  CHECK(strstr(err, "secure build") != NULL, "banner does not say secure: %s", err);
}

/* Where a process's first SuperSlab lands, in slots of the arena: a child
 * prints it (run_self). */
static long first_slot(void) {
  const char *env[] = {NULL};
  char out[256], err[256];
  run_self(env, out, sizeof out, err, sizeof err);
  return atol(out);
}

static void test_first_slot_random(void) {
  long a = first_slot(), b = first_slot(), c = first_slot();
  CHECK(a >= 0 && !(a == b && b == c), "three processes put their first SuperSlab in slot %ld, %ld, %ld", a, b, c);
}

static const test_case_t cases[] = {
    {"superslab_guards", test_superslab_guards},
    {"large_guards", test_large_guards},
    {"fresh_order", test_fresh_order},
    {"superslab_placement", test_superslab_placement},
    {"encoded_links", test_encoded_links},
    {"banner", test_banner},
    {"first_slot_random", test_first_slot_random},
};

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child")) {
    void *p = T_malloc(16);
    printf("%ld\n", hak_arena_size ? (long)(((uintptr_t)p - hak_arena_base) >> HAK_SS_SHIFT) : -1);
    return 0;
  }
  return RUN_CASES("secure", cases, argc, argv);
}
