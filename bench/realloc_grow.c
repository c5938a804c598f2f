/* realloc_grow [STRINGS] [MAXLEN] [LIVE] [VEC_MIB] [SEED]
 *
 * Growth by realloc, from a few bytes to hundreds of MiB.
 * Strings: STRINGS (default 20000) strings are built LIVE (default 256) at a
 * time, round-robin, each to a random length up to MAXLEN (default 4096),
 * in one of three styles: one byte per realloc (to at most MAXLEN/8), random
 * 1..64-byte appends each with an exact-size realloc, or appends into a
 * capacity that doubles. Every string's content is checked, then freed.
 * Vector: one array of 8-byte elements grown by x1.5 reallocs from 16
 * elements to VEC_MIB MiB (default 256), new elements filled on every step,
 * everything checked at the end.
 * Prints realloc calls per second (over the whole run). */
#include "bench.h"

#define NAME "realloc_grow"

struct str {
  unsigned char *p;
  size_t len, cap, target;
  int style;
  uint64_t id;
};

static inline unsigned char str_byte(uint64_t id, size_t j) {
  return (unsigned char)(id * 131u + j * 7u + (j >> 8));
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 6 || bench_help(argc, argv), NAME " [STRINGS] [MAXLEN] [LIVE] [VEC_MIB] [SEED]");
  long nstrings = bench_arg(argc, argv, 1, 20000);
  long maxlen = bench_arg(argc, argv, 2, 4096);
  long live = bench_arg(argc, argv, 3, 256);
  long vec_mib = bench_arg(argc, argv, 4, 256);
  uint64_t rng = bench_seed((uint64_t)bench_arg(argc, argv, 5, 1), 0);
  if (nstrings < 0 || maxlen < 8 || live <= 0 || vec_mib < 0)
    bench_die(2, NAME ": bad arguments");

  struct str *s = calloc((size_t)live, sizeof *s);
  if (!s) BENCH_OOM(NAME, live);
  long reallocs = 0;
  uint64_t sum = 0;
  double t0 = bench_now();

  for (long base = 0; base < nstrings; base += live) {
    long n = nstrings - base < live ? nstrings - base : live;
    for (long i = 0; i < n; i++) {
      struct str *x = &s[i];
      x->p = NULL;
      x->len = x->cap = 0;
      x->id = (uint64_t)(base + i);
      x->style = (int)(bench_rng(&rng) % 3);
      size_t lim = x->style == 0 ? (size_t)maxlen / 8 : (size_t)maxlen;
      x->target = bench_size(&rng, 1, lim);
    }
    for (long pending = n; pending > 0;) {
      pending = 0;
      for (long i = 0; i < n; i++) {
        struct str *x = &s[i];
        if (x->len >= x->target) continue;
        size_t add = x->style == 0 ? 1 : bench_size(&rng, 1, 64);
        if (add > x->target - x->len) add = x->target - x->len;
        size_t need = x->len + add;
        if (need > x->cap) {
          size_t cap = need;
          if (x->style == 2) {
            cap = x->cap ? x->cap : 16;
            while (cap < need) cap *= 2;
          }
          unsigned char *q = realloc(x->p, cap);
          if (!q) BENCH_OOM(NAME, cap);
          reallocs++;
          x->p = q;
          x->cap = cap;
        }
        for (size_t j = x->len; j < need; j++) x->p[j] = str_byte(x->id, j);
        x->len = need;
        if (x->len < x->target) pending++;
      }
    }
    for (long i = 0; i < n; i++) {
      struct str *x = &s[i];
      for (size_t j = 0; j < x->len; j++)
        if (x->p[j] != str_byte(x->id, j))
          BENCH_CORRUPT(NAME, "string %llu byte %zu of %zu", (unsigned long long)x->id, j,
                        x->len);
      sum += x->len;
      free(x->p);
    }
  }
  free(s);

  size_t want = (size_t)vec_mib << 20 >> 3; /* elements */
  if (want) {
    uint64_t *v = NULL;
    size_t len = 0, cap = 16;
    for (;;) {
      if (cap > want) cap = want;
      uint64_t *q = realloc(v, cap * sizeof *v);
      if (!q) BENCH_OOM(NAME, cap * sizeof *v);
      reallocs++;
      v = q;
      for (size_t i = len; i < cap; i++) v[i] = i * 0x9E3779B97F4A7C15ull;
      len = cap;
      if (len == want) break;
      cap = cap + cap / 2;
    }
    for (size_t i = 0; i < len; i++)
      if (v[i] != i * 0x9E3779B97F4A7C15ull)
        BENCH_CORRUPT(NAME, "vector element %zu of %zu", i, len);
    sum += v[len - 1];
    free(v);
  }
  double secs = bench_now() - t0;
  bench_sink = sum;
  printf(NAME ": %ld strings, %ld MiB vector, %ld reallocs in %.3f s = %.0f ops/s\n", nstrings,
         vec_mib, reallocs, secs, (double)reallocs / secs);
  return 0;
}
