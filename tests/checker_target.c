/* A program for memory checkers, built linked with the Valgrind-aware
 * hakmem (build/valgrind), the AddressSanitizer-aware one (build/asan-aware,
 * the program instrumented), the default hakmem and glibc's malloc
 * (tests/valgrind.sh, tests/asan.sh).
 *
 *   checker leak       one block of 100 bytes lost
 *   checker uaf        a read of a freed block (it is in hakmem's cache)
 *   checker overflow   a write one byte past a 24-byte block
 *   checker uninit     a branch on a byte malloc did not set
 *   checker foreign    strdup, strndup, getcwd and realpath blocks, realloc'd,
 *                      measured and freed (under the sanitizer its
 *                      interceptors allocate some of them from its own heap)
 *   checker clean      the whole malloc family on 3 threads, blocks
 *                              of up to 600 KiB, realloc across tiers, every
 *                              block checked, the last ones freed by the
 *                              main thread: no error, no leak */
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned char sink;

enum { N = 400 };
struct blocks {
  unsigned seed;
  unsigned char *p[N];
  size_t n[N];
};

static void *churn(void *arg) {
  struct blocks *b = arg;
  unsigned seed = b->seed;
  unsigned char **p = b->p;
  size_t *n = b->n;
  for (int i = 0; i < 8000; i++) {
    seed = seed * 1103515245u + 12345u;
    int k = (int)(seed >> 8) % N;
    if (p[k]) {
      for (size_t j = 0; j < n[k]; j++)
        if (p[k][j] != (unsigned char)(k + n[k])) abort();
      if (seed & 0x10000) {
        size_t m = seed % 7 == 0 ? (seed >> 4) % 600000 + 1 : (seed >> 4) % 3000 + 1;
        unsigned char *q = realloc(p[k], m);
        if (!q) abort();
        for (size_t j = 0; j < (m < n[k] ? m : n[k]); j++)
          if (q[j] != (unsigned char)(k + n[k])) abort();
        memset(q, (unsigned char)(k + m), m);
        p[k] = q;
        n[k] = m;
        continue;
      }
      free(p[k]);
      p[k] = NULL;
      continue;
    }
    size_t m = (seed >> 12) % 5 == 0 ? (seed >> 4) % 300000 + 1 : (seed >> 4) % 1500 + 1;
    switch (seed % 4) {
      case 0: p[k] = malloc(m); break;
      case 1:
        p[k] = calloc(1, m);
        for (size_t j = 0; j < m; j++)
          if (p[k][j]) abort();
        break;
      case 2: p[k] = aligned_alloc(64, (m + 63) & ~(size_t)63); break;
      default:
        if (posix_memalign((void **)&p[k], 4096, m)) abort();
        break;
    }
    if (!p[k]) abort();
    memset(p[k], (unsigned char)(k + m), m);
    n[k] = m;
  }
  return NULL;   /* the main thread checks and frees what is left */
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "clean";
  if (!strcmp(mode, "leak")) {
    char *volatile p = malloc(100);   /* volatile: the compiler keeps the call */
    memset(p, 1, 100);
    p = NULL;
  } else if (!strcmp(mode, "uaf")) {
    char *p = malloc(64);
    char *volatile kept = p;   /* hides the use after free from the compiler */
    memset(p, 2, 64);
    free(p);
    sink = (unsigned char)kept[8];
  } else if (!strcmp(mode, "overflow")) {
    volatile size_t n = 24;   /* a size the compiler cannot see the end of */
    char *volatile p = malloc(n);
    ((volatile char *)p)[n] = 3;
    free(p);
  } else if (!strcmp(mode, "foreign")) {
    char *a = strdup("checker"), *b = strndup("checker target", 7), *c = getcwd(NULL, 0), *d = realpath(".", NULL);
    if (!a || !b || !c || !d || strcmp(a, b) || strcmp(c, d) || malloc_usable_size(a) < 8) abort();
    a = realloc(a, 4000);
    strcat(a, " grown");
    if (strcmp(a, "checker grown")) abort();
    free(a);
    free(b);
    free(c);
    free(d);
  } else if (!strcmp(mode, "uninit")) {
    char *volatile p = malloc(32);
    if (p[5] == 7) puts("seven");
    free(p);
  } else {
    static struct blocks b[3];
    pthread_t t[3];
    for (unsigned i = 0; i < 3; i++) {
      b[i].seed = i + 1;
      pthread_create(&t[i], NULL, churn, &b[i]);
    }
    for (int i = 0; i < 3; i++) {
      pthread_join(t[i], NULL);
      for (int k = 0; k < N; k++) {
        for (size_t j = 0; j < b[i].n[k] && b[i].p[k]; j++)
          if (b[i].p[k][j] != (unsigned char)(k + b[i].n[k])) abort();
        free(b[i].p[k]);
      }
    }
  }
  puts("done");
  return 0;
}
