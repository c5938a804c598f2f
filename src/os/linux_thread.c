/* The OS layer for Linux: time, waiting, threads and the hooks the
 * process's threads run (thread exit, fork). */
#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "linux.h"
#include "os.h"

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

static pthread_key_t thread_key;

bool hak_os_thread_exit_init(void (*fn)(void *)) {
  int e = errno;
  bool ok = pthread_key_create(&thread_key, fn) == 0;
  errno = e;
  return ok;
}

void hak_os_thread_exit_arg(void *arg) {
  int e = errno;
  pthread_setspecific(thread_key, arg);
  errno = e;
}

void hak_os_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  int e = errno;
  pthread_atfork(prepare, parent, child);
  errno = e;
}

/* The main thread's bounds come from /proc/self/maps, which glibc reads
 * with stdio: errno may change on the way. */
bool hak_os_thread_stack(uintptr_t *lo, uintptr_t *hi) {
  pthread_attr_t attr;
  void *low;
  size_t size;
  bool ok = false;
  int e = errno;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    if (pthread_attr_getstack(&attr, &low, &size) == 0) {
      *lo = (uintptr_t)low;
      *hi = (uintptr_t)low + size;
      ok = true;
    }
    pthread_attr_destroy(&attr);
  }
  errno = e;
  return ok;
}
