/* The OS layer for Linux: the process's files and output, its
 * environment, randomness, signals, the shared libraries it has loaded,
 * and its end. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "linux.h"
#include "os.h"

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

void *hak_os_library_open(const char *name) {
  int e = errno;
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  errno = e;
  return lib;
}

void *hak_os_library_symbol(void *lib, const char *name) {
  int e = errno;
  void *sym = dlsym(lib, name);
  errno = e;
  return sym;
}

void hak_os_on_signal(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;
  int e = errno;
  sigaction(sig, &sa, NULL);
  errno = e;
}

_Noreturn void hak_os_abort(void) { abort(); }
