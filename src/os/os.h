/* The OS layer: the only place that talks to the kernel or to the C
 * library's process services (threads and their keys, fork handlers,
 * signals, the dynamic loader). For Linux: src/os/linux.c (memory),
 * linux_thread.c (time, waits, threads), linux_process.c (files, the
 * environment, signals, libraries). Every function keeps errno as it
 * found it; failures are reported by return value. */
#ifndef HAK_OS_H
#define HAK_OS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reads the page size and the process secret; call once, first. */
void     hak_os_init(void);
size_t   hak_os_page_size(void);

/* Fresh zeroed read-write memory, or NULL. size is a multiple of the page size. */
void    *hak_os_map(size_t size);
/* As hak_os_map, aligned to align (a power of two, at least a page). */
void    *hak_os_map_aligned(size_t size, size_t align);
/* A read-write range aligned to align that is never charged against the
 * commit limit (MAP_NORESERVE): pages cost memory once touched. NULL if the
 * address space cannot be had, or under strict overcommit accounting (where
 * it would be charged in full). */
void    *hak_os_reserve_aligned(size_t size, size_t align);
void     hak_os_unmap(void *p, size_t size);
/* Make whole pages inaccessible (a guard: any access faults). */
void     hak_os_guard(void *p, size_t size);
/* Make a guard read-write again. */
void     hak_os_unguard(void *p, size_t size);
/* Drop the pages' contents: the range reads as zero afterwards, RSS shrinks. */
void     hak_os_decommit(void *p, size_t size);
/* Fault in the pages of a range now, writable, with one call instead of a
 * page fault each (MADV_POPULATE_WRITE; nothing where the kernel has it
 * not, before Linux 5.14). */
void     hak_os_populate(void *p, size_t size);
/* How many pages of [p, p + size) are resident (mincore); 0 if it cannot
 * be told. p and size in whole pages. */
size_t   hak_os_resident_pages(const void *p, size_t size);
/* Grow a mapping in place (new_size > old_size); 0 on success. */
int      hak_os_remap_inplace(void *p, size_t old_size, size_t new_size);
/* Move a mapping to a fresh address aligned to align; NULL on failure, in
 * which case the old mapping is untouched. */
void    *hak_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align);

uint64_t hak_os_now_ms(void);
/* Sleep while *word == expected (a futex), until hak_os_wake(word) or
 * timeout_ms (0: none) passes. */
void     hak_os_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ms);
void     hak_os_wake(_Atomic uint32_t *word);
/* Let other threads run (sched_yield). */
void     hak_os_yield(void);
/* Every other running thread of the process executes a full memory
 * barrier before this returns (membarrier, private expedited; one that is
 * not running passed a context switch, which is one): the owner's half of
 * a cache drain's fence (docs/design/thread-memory.md). false if the kernel
 * cannot (before 4.14, Valgrind, a seccomp filter): then there is no
 * fence, and nothing may rely on one. */
bool     hak_os_fence_others(void);
/* Run fn(NULL) in a new thread that blocks every signal; *id names it for
 * hak_os_thread_join. */
bool     hak_os_thread_start(void *(*fn)(void *), uintptr_t *id);
void     hak_os_thread_join(uintptr_t id);
/* Have fn(arg) run when a thread exits, arg being what the thread last
 * gave hak_os_thread_exit_arg (nothing runs while that is NULL); once, at
 * init: false if it cannot be had. */
bool     hak_os_thread_exit_init(void (*fn)(void *));
void     hak_os_thread_exit_arg(void *arg);
/* Handlers run around fork(), as pthread_atfork's. */
void     hak_os_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* The calling thread's stack, [lo, hi); false if it cannot be told. May
 * allocate. */
bool     hak_os_thread_stack(uintptr_t *lo, uintptr_t *hi);
/* handler(sig) runs on signal sig (system calls it interrupts restart). */
void     hak_os_on_signal(int sig, void (*handler)(int));
/* 64 random bits: from the kernel's generator, or if it cannot be read, from
 * the bytes the kernel gives every process mixed with the clock. */
uint64_t hak_os_random(void);

/* Write all of s to fd (2: stderr) without allocating. */
void     hak_os_write_fd(int fd, const char *s, size_t n);
int      hak_os_pid(void);
/* Open a file for writing (created, truncated); -1 on failure. */
int      hak_os_open_write(const char *path);
/* Open for appending (created if need be), locked against the other
 * processes that append to it until closed; -1 on failure. */
int      hak_os_open_append(const char *path);
bool     hak_os_cwd(char *buf, size_t n);   /* the working directory; false if it does not fit */
void     hak_os_close(int fd);
/* A close-on-exec copy of fd, numbered from 100 up (away from those a
 * program expects), with the identity of its file into id; -1 on failure. */
int      hak_os_dup(int fd, uint64_t id[2]);
/* fd is open (on the file id names, if id is not NULL). */
bool     hak_os_fd_open(int fd, const uint64_t id[2]);
/* Append the whole of a file (/proc/self/maps) to fd; false if it cannot be read. */
bool     hak_os_copy_file(const char *path, int fd);
/* Read up to n - 1 bytes of a small file (/proc, /sys) into buf, NUL-ended;
 * returns the length, or -1. */
long     hak_os_read_file(const char *path, char *buf, size_t n);
/* The process's environment: options.c's scan, and track.c's look for
 * memcheck's preload in LD_PRELOAD. */
char   **hak_os_environ(void);
/* The shared library hakmem's code was loaded from (libhakmem.so.N); false
 * if the program links hakmem statically, or the name is unknown or too long. */
bool     hak_os_own_library(char *buf, size_t n);
bool     hak_os_readable(const char *path);
/* A shared library loaded (dlopen) for its symbols, or NULL; may allocate. */
void    *hak_os_library_open(const char *name);
void    *hak_os_library_symbol(void *lib, const char *name);
/* Overwrite n bytes of the library's code at `at` (counted.c), the pages
 * writable meanwhile; false if they cannot be made so. */
bool     hak_os_code_write(void *at, const void *bytes, size_t n);

/* Counts of the calls above that change the address space. */
typedef struct hak_os_counters_s {
  uint64_t maps, map_bytes, unmaps, unmap_bytes, decommits, decommit_bytes, remaps;
  uint64_t reserved_bytes;   /* of maps: address space reserved, charged nothing (the arena) */
} hak_os_counters_t;
void     hak_os_counters(hak_os_counters_t *out);
_Noreturn void hak_os_abort(void);

#endif
