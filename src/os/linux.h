/* The OS layer for Linux, inside the layer only: how its files make the
 * kernel's calls. */
#ifndef HAK_OS_LINUX_H
#define HAK_OS_LINUX_H

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

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
#define os_mincore(a, n, vec) syscall(SYS_mincore, a, n, vec)
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
#define os_mincore mincore
#endif

#endif
