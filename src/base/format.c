/* Text output without stdio or allocation: warnings, fatal messages, the
 * route banner and the statistics report are all built with these. Output
 * goes out in pieces through a hak_write_fn whenever a line ends or the
 * buffer fills. */
#include "internal.h"

void hak_write_fd(const char *text, void *arg) { hak_os_write_fd(*(int *)arg, text, strlen(text)); }

static void write_stderr(const char *text, void *arg) { hak_os_write_fd(2, text, strlen(text)); }

void hak_out_init(hak_out_t *o, hak_write_fn *write, void *arg) {
  o->n = 0;
  o->write = write ? write : write_stderr;
  o->arg = arg;
}

void hak_out_flush(hak_out_t *o) {
  if (!o->n) return;
  o->buf[o->n] = 0;
  o->write(o->buf, o->arg);
  o->n = 0;
}

static void put(hak_out_t *o, char c) {
  if (o->n == sizeof o->buf - 1) hak_out_flush(o);
  o->buf[o->n++] = c;
  if (c == '\n') hak_out_flush(o);
}

void hak_out_str(hak_out_t *o, const char *s) {
  while (*s) put(o, *s++);
}

/* The n characters at s (not NUL-ended). */
void hak_out_chars(hak_out_t *o, const char *s, size_t n) {
  while (n--) put(o, *s++);
}

/* Unsigned decimal, right-aligned in width columns (0: no padding). */
void hak_out_u64w(hak_out_t *o, uint64_t v, unsigned width) {
  char digits[21];
  unsigned n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (width > n) {
    put(o, ' ');
    width--;
  }
  while (n) put(o, digits[--n]);
}

void hak_out_u64(hak_out_t *o, uint64_t v) { hak_out_u64w(o, v, 0); }

void hak_out_i64(hak_out_t *o, int64_t v) {
  if (v < 0) {
    put(o, '-');
    hak_out_u64(o, (uint64_t)0 - (uint64_t)v);
  } else {
    hak_out_u64(o, (uint64_t)v);
  }
}

void hak_out_hex(hak_out_t *o, uint64_t v) {
  hak_out_str(o, "0x");
  int d = 15;
  while (d > 0 && !(v >> (4 * d))) d--;
  for (; d >= 0; d--) put(o, "0123456789abcdef"[(v >> (4 * d)) & 15]);
}

void hak_out_version(hak_out_t *o) {
  hak_out_u64(o, HAKMEM_VERSION_MAJOR);
  hak_out_str(o, ".");
  hak_out_u64(o, HAKMEM_VERSION_MINOR);
  hak_out_str(o, ".");
  hak_out_u64(o, HAKMEM_VERSION_PATCH);
}

/* A byte count the way options are written: 64K, 128M, 1G, or plain. */
void hak_out_size(hak_out_t *o, uint64_t v) {
  static const char units[] = "KMGT";
  unsigned u = 0;
  while (v && v % 1024 == 0 && u < 4) {
    v /= 1024;
    u++;
  }
  hak_out_u64(o, v);
  if (u) put(o, units[u - 1]);
}

/* Decimal digits of v, ending at end; returns where they start. */
static char *digits_of(uint64_t v, char *end) {
  do *--end = (char)('0' + v % 10);
  while (v /= 10);
  return end;
}

bool hak_path_expand(const char *pattern, uint64_t seq, char *buf, size_t n) {
  char pid[24], num[24];
  const char *pid_at = digits_of((uint64_t)hak_os_pid(), pid + sizeof pid);
  const char *num_at = digits_of(seq, num + sizeof num);
  size_t len = 0;
  for (const char *c = pattern; *c; c++) {
    const char *from = c;
    size_t k = 1;
    if (c[0] == '%' && (c[1] == 'p' || c[1] == 'n')) {
      from = *++c == 'p' ? pid_at : num_at;
      k = (size_t)((*c == 'p' ? pid + sizeof pid : num + sizeof num) - from);
    }
    if (len + k >= n) return false;
    memcpy(buf + len, from, k);
    len += k;
  }
  buf[len] = 0;
  return true;
}

/* "hakmem: <fn>(): <what> 0x<p>" on one line, then abort. No allocation. */
_Noreturn HAK_COLD void hak_fatal_pointer(const char *fn, const char *what, const void *p) {
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "hakmem: ");
  hak_out_str(&o, fn);
  hak_out_str(&o, "(): ");
  hak_out_str(&o, what);
  hak_out_str(&o, " ");
  hak_out_hex(&o, (uintptr_t)p);
  hak_out_str(&o, "\n");
  hak_os_abort();
}
