/* The OS layer for Linux. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "os.h"
#include "track.h"

/* The kernel's calls. The AddressSanitizer-aware build (make ASAN=1) makes
 * them as raw system calls: the sanitizer intercepts the libc functions, and
 * hakmem's first allocation comes while it is still setting its
 * interceptors up (its dlsym allocates), when they cannot pass a call on. */
#if HAK_ASAN
#define os_mmap(a, n, prot, flags, fd, off) ((void *)syscall(SYS_mmap, a, n, prot, flags, fd, off))
#define os_munmap(a, n) syscall(SYS_munmap, a, n)
#define os_madvise(a, n, advice) syscall(SYS_madvise, a, n, advice)
#define os_mprotect(a, n, prot) syscall(SYS_mprotect, a, n, prot)
#define os_mremap(...) ((void *)syscall(SYS_mremap, __VA_ARGS__))
#define os_clock_gettime(clock, ts) syscall(SYS_clock_gettime, clock, ts)
#define os_open(path, flags, ...) ((int)syscall(SYS_openat, AT_FDCWD, path, flags, ##__VA_ARGS__))
#define os_read(fd, buf, n) syscall(SYS_read, fd, buf, n)
#define os_write(fd, buf, n) syscall(SYS_write, fd, buf, n)
#define os_close(fd) syscall(SYS_close, fd)
#define os_getpid() ((int)syscall(SYS_getpid))
#define os_flock(fd, op) syscall(SYS_flock, fd, op)
#define os_getcwd(buf, n) (syscall(SYS_getcwd, buf, n) > 0 ? (buf) : NULL)
#else
#define os_mmap mmap
#define os_munmap munmap
#define os_madvise madvise
#define os_mprotect mprotect
#define os_mremap mremap
#define os_clock_gettime clock_gettime
#define os_open open
#define os_read read
#define os_write write
#define os_close close
#define os_getpid getpid
#define os_flock flock
#define os_getcwd getcwd
#endif

static size_t page_size = 4096;

static _Atomic uint64_t n_maps, n_map_bytes, n_unmaps, n_unmap_bytes, n_decommits, n_decommit_bytes, n_remaps;
static _Atomic uint64_t n_reserved_bytes;   /* address space reserved (MAP_NORESERVE), not memory */

static void count(_Atomic uint64_t *calls, _Atomic uint64_t *bytes, size_t size) {
  atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
  if (bytes) atomic_fetch_add_explicit(bytes, size, memory_order_relaxed);
}

void hak_os_counters(hak_os_counters_t *out) {
  out->maps = atomic_load(&n_maps);
  out->map_bytes = atomic_load(&n_map_bytes);
  out->unmaps = atomic_load(&n_unmaps);
  out->unmap_bytes = atomic_load(&n_unmap_bytes);
  out->decommits = atomic_load(&n_decommits);
  out->decommit_bytes = atomic_load(&n_decommit_bytes);
  out->remaps = atomic_load(&n_remaps);
  out->reserved_bytes = atomic_load(&n_reserved_bytes);
}

void hak_os_init(void) {
  unsigned long ps = getauxval(AT_PAGESZ);
  if (ps) page_size = ps;
}

size_t hak_os_page_size(void) { return page_size; }

static void *map_raw(void *hint, size_t size, int prot, int extra) {
  int e = errno;
  void *p = os_mmap(hint, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
  errno = e;
  if (p == MAP_FAILED) return NULL;
  count(&n_maps, extra & MAP_NORESERVE ? &n_reserved_bytes : &n_map_bytes, size);
  HAK_TRACK_MAPPED(p, size);
  return p;
}

void *hak_os_map(size_t size) { return map_raw(NULL, size, PROT_READ | PROT_WRITE, 0); }

void hak_os_unmap(void *p, size_t size) {
  int e = errno;
  count(&n_unmaps, &n_unmap_bytes, size);
  os_munmap(p, size);
  errno = e;
}

/* Where the next aligned mapping is likely to fit: just below the last one,
 * as the kernel places mappings top-down. */
static _Atomic uintptr_t aligned_hint;

/* Unmap a trimmed end of a mapping (of a reservation: extra has
 * MAP_NORESERVE, and the bytes come off the reserved ones). */
static void trim(void *p, size_t size, int extra) {
  if (!(extra & MAP_NORESERVE)) {
    hak_os_unmap(p, size);
    return;
  }
  int e = errno;
  count(&n_unmaps, NULL, 0);
  atomic_fetch_sub_explicit(&n_reserved_bytes, size, memory_order_relaxed);
  os_munmap(p, size);
  errno = e;
}

/* Over-allocate by align and trim both ends. */
static void *map_trimmed(size_t size, size_t align, int extra) {
  if (size + align < size) return NULL;
  char *p = map_raw(NULL, size + align, PROT_READ | PROT_WRITE, extra);
  if (!p) return NULL;
  uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = a - (uintptr_t)p;
  size_t tail = align - head;
  if (head) trim(p, head, extra);
  if (tail) trim((char *)a + size, tail, extra);
  return (void *)a;
}

/* One mmap at the hint when the kernel grants it (the common case), else
 * over-allocate and trim. */
void *hak_os_map_aligned(size_t size, size_t align) {
  uintptr_t span = (size + align - 1) & ~(uintptr_t)(align - 1);
  uintptr_t hint = atomic_load_explicit(&aligned_hint, memory_order_relaxed);
  if (hint > span && !(hint & (align - 1))) {
    char *q = map_raw((void *)(hint - span), size, PROT_READ | PROT_WRITE, 0);
    if (q && !((uintptr_t)q & (align - 1))) {
      atomic_store_explicit(&aligned_hint, (uintptr_t)q, memory_order_relaxed);
      return q;
    }
    if (q) hak_os_unmap(q, size);
  }
  char *a = map_trimmed(size, align, 0);
  if (a) atomic_store_explicit(&aligned_hint, (uintptr_t)a, memory_order_relaxed);
  return a;
}

/* Under strict overcommit (vm.overcommit_memory = 2) the kernel ignores
 * MAP_NORESERVE and would charge the whole range: refuse instead. */
void *hak_os_reserve_aligned(size_t size, size_t align) {
  char mode[8];
  if (hak_os_read_file("/proc/sys/vm/overcommit_memory", mode, sizeof mode) > 0 && mode[0] == '2') return NULL;
  return map_trimmed(size, align, MAP_NORESERVE);
}

/* A page size above the guard's leaves it an ordinary part of the range. */
static void protect(void *p, size_t size, int prot) {
  if ((uintptr_t)p & (page_size - 1) || size & (page_size - 1)) return;
  int e = errno;
  os_mprotect(p, size, prot);
  errno = e;
}

void hak_os_guard(void *p, size_t size) { protect(p, size, PROT_NONE); }

void hak_os_unguard(void *p, size_t size) { protect(p, size, PROT_READ | PROT_WRITE); }

void hak_os_decommit(void *p, size_t size) {
  int e = errno;
  count(&n_decommits, &n_decommit_bytes, size);
  os_madvise(p, size, MADV_DONTNEED);
  errno = e;
}

/* Growing in place extends the mapping over the pages just past its end, if
 * they are free. mremap keeps it one mapping, which a later move needs:
 * mremap moves a single mapping, and pages mapped next to a mapping that was
 * moved are not merged with it (their page offsets do not follow on), so a
 * block grown that way could only be copied. ThreadSanitizer does not see
 * mremap and would keep the history of whatever was at those addresses
 * before, so its builds map the new pages instead (and copy on a move). */
int hak_os_remap_inplace(void *p, size_t old_size, size_t new_size) {
  int e = errno;
  count(&n_remaps, NULL, 0);
#if defined(__SANITIZE_THREAD__)
  char *want = (char *)p + old_size;
  void *q = os_mmap(want, new_size - old_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                 -1, 0);
  if (q != MAP_FAILED && q != want) os_munmap(q, new_size - old_size);   /* a kernel before 4.17: only a hint */
  errno = e;
  return q == want ? 0 : -1;
#else
  void *q = os_mremap(p, old_size, new_size, 0);
  errno = e;
  if (q != p) return -1;
  HAK_TRACK_MAPPED(p, new_size);
  return 0;
#endif
}

/* Reserve an aligned target without access, then move the pages into it. */
void *hak_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align) {
  int e = errno;
  char *r = os_mmap(NULL, new_size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) {
    errno = e;
    return NULL;
  }
  uintptr_t a = ((uintptr_t)r + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = a - (uintptr_t)r;
  if (head) os_munmap(r, head);
  if (align - head) os_munmap((char *)a + new_size, align - head);
  count(&n_remaps, NULL, 0);
  void *q = os_mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a);
  if (q == MAP_FAILED) {
    os_munmap((void *)a, new_size);
    q = NULL;
  } else {
    HAK_TRACK_MAPPED(q, new_size);
  }
  errno = e;
  return q;
}

uint64_t hak_os_now_ms(void) {
  struct timespec ts;
  os_clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void hak_os_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ms) {
  int e = errno;
  struct timespec ts = {(time_t)(timeout_ms / 1000u), (long)(timeout_ms % 1000u) * 1000000L};
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, timeout_ms ? &ts : NULL, NULL, 0);
  errno = e;
}

void hak_os_wake(_Atomic uint32_t *word) {
  int e = errno;
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  errno = e;
}

void hak_os_yield(void) {
  int e = errno;
  sched_yield();
  errno = e;
}

/* The process registers for the expedited command the first time it needs
 * it; a command refused with EPERM (not registered: the first call, or a
 * forked child, whose registration its new mm may not carry) registers and
 * tries again. A kernel without the command (ENOSYS, EINVAL) is not asked
 * again; other refusals (a seccomp filter, an interrupted call under
 * Valgrind) fail this fence only. */
bool hak_os_fence_others(void) {
  static _Atomic int unsupported;
  if (atomic_load_explicit(&unsupported, memory_order_relaxed)) return false;
  int e = errno;
  long r = syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  if (r != 0 && errno == EPERM && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
    r = syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  if (r != 0 && (errno == ENOSYS || errno == EINVAL)) atomic_store_explicit(&unsupported, 1, memory_order_relaxed);
  errno = e;
  return r == 0;
}

/* Every signal blocked (so that none meant for the program is delivered
 * to it), with a small stack: 256 KiB, or the default size if the program's
 * thread-local storage (which glibc places on the stack) needs more. */
bool hak_os_thread_start(void *(*fn)(void *), uintptr_t *id) {
  int e = errno;
  pthread_attr_t attr;
  pthread_t t;
  sigset_t all, old;
  bool ok = false;
  if (pthread_attr_init(&attr) == 0) {
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ok = pthread_attr_setstacksize(&attr, 256 * 1024) == 0 && pthread_create(&t, &attr, fn, NULL) == 0;
    if (!ok) ok = pthread_create(&t, NULL, fn, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
  }
  if (ok) *id = (uintptr_t)t;
  errno = e;
  return ok;
}

void hak_os_thread_join(uintptr_t id) {
  int e = errno;
  pthread_join((pthread_t)id, NULL);
  errno = e;
}

uint64_t hak_os_random(void) {
  uint64_t r = 0;
  int e = errno;
  long got = syscall(SYS_getrandom, &r, sizeof r, GRND_NONBLOCK);
  errno = e;
  if (got == (long)sizeof r) return r;
  const unsigned char *ar = (const unsigned char *)getauxval(AT_RANDOM);
  if (ar) memcpy(&r, ar, sizeof r);
  struct timespec ts;
  os_clock_gettime(CLOCK_MONOTONIC, &ts);
  r ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull;
  r ^= r >> 31;
  return r;
}

void hak_os_write_fd(int fd, const char *s, size_t n) {
  int e = errno;
  while (n) {
    ssize_t w = os_write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    s += w;
    n -= (size_t)w;
  }
  errno = e;
}

int hak_os_pid(void) { return os_getpid(); }

int hak_os_open_write(const char *path) {
  int e = errno;
  int fd = os_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  errno = e;
  return fd;
}

int hak_os_open_append(const char *path) {
  int e = errno;
  int fd = os_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) os_flock(fd, LOCK_EX);
  errno = e;
  return fd;
}

bool hak_os_cwd(char *buf, size_t n) {
  int e = errno;
  bool ok = os_getcwd(buf, n) != NULL;
  errno = e;
  return ok;
}

bool hak_os_copy_file(const char *path, int fd) {
  int e = errno;
  int in = os_open(path, O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    errno = e;
    return false;
  }
  char buf[4096];
  long n;
  while ((n = os_read(in, buf, sizeof buf)) > 0) hak_os_write_fd(fd, buf, (size_t)n);
  os_close(in);
  errno = e;
  return n == 0;
}

void hak_os_close(int fd) {
  int e = errno;
  os_close(fd);
  errno = e;
}

int hak_os_dup(int fd, uint64_t id[2]) {
  int e = errno;
  struct stat st;
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 100);
  if (copy >= 0 && fstat(copy, &st) == 0) {
    id[0] = (uint64_t)st.st_dev;
    id[1] = (uint64_t)st.st_ino;
  } else if (copy >= 0) {
    os_close(copy);
    copy = -1;
  }
  errno = e;
  return copy;
}

bool hak_os_fd_open(int fd, const uint64_t id[2]) {
  int e = errno;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && (!id || ((uint64_t)st.st_dev == id[0] && (uint64_t)st.st_ino == id[1]));
  errno = e;
  return ok;
}

long hak_os_read_file(const char *path, char *buf, size_t n) {
  int e = errno;
  int fd = os_open(path, O_RDONLY | O_CLOEXEC);
  long len = -1;
  if (fd >= 0) {
    len = 0;
    ssize_t r;
    while ((size_t)len + 1 < n && (r = os_read(fd, buf + len, n - 1 - (size_t)len)) > 0) len += r;
    buf[len] = 0;
    os_close(fd);
  }
  errno = e;
  return len;
}

char **hak_os_environ(void) { return environ; }

bool hak_os_own_library(char *buf, size_t n) {
  Dl_info info;
  struct link_map *map = NULL;
  if (!dladdr1((void *)(uintptr_t)hak_os_own_library, &info, (void **)&map, RTLD_DL_LINKMAP) || !map ||
      !map->l_name || !map->l_name[0] || !info.dli_fname)   /* the program's own map has no name */
    return false;
  size_t len = strlen(info.dli_fname);
  if (len >= n) return false;
  memcpy(buf, info.dli_fname, len + 1);
  return true;
}

bool hak_os_readable(const char *path) {
  int e = errno;
  bool ok = access(path, R_OK) == 0;
  errno = e;
  return ok;
}

/* Executable while written, in case another thread runs the page's other
 * code meanwhile. */
bool hak_os_code_write(void *at, const void *bytes, size_t n) {
  size_t page = hak_os_page_size();
  uintptr_t lo = (uintptr_t)at & ~(page - 1), hi = ((uintptr_t)at + n + page - 1) & ~(page - 1);
  int e = errno;
  bool ok = os_mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) == 0;
  if (ok) {
    memcpy(at, bytes, n);
    os_mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC);
    __builtin___clear_cache((char *)at, (char *)at + n);
  }
  errno = e;
  return ok;
}

_Noreturn void hak_os_abort(void) { abort(); }
