/* runone [-o FILE] [-t SECONDS] [-e NAME=VALUE]... -- PROGRAM [ARG...]
 *
 * Runs PROGRAM once (its stdout/stderr are runone's) and writes one line to
 * FILE (default: stderr) describing how it went, measured with wait4():
 *
 *   runone: status=<wait status> signal=<n> timeout=<0|1> wall_s=<s>
 *           maxrss_kib=<n> minflt=<n> majflt=<n> utime_s=<s> stime_s=<s>
 *
 * Why not measure from the benchmark runner (Python) directly: Linux keeps
 * the peak RSS of the memory image a process had before execve() in its
 * ru_maxrss, so any program started from a Python process reports at least
 * Python's RSS. runone is small, and PROGRAM is forked from it, so its
 * ru_maxrss is PROGRAM's own. The -e variables (e.g. LD_PRELOAD) are set in
 * the child only, so runone itself never runs with the allocator under test.
 * The child gets its own process group; on timeout (-t, default none) the
 * whole group is killed with SIGKILL. Exit status: 0 if the line was
 * written (whatever PROGRAM did), 2 on usage or system errors. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double tv(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec / 1e6; }

int main(int argc, char **argv) {
  double timeout = 0;
  int i = 1;
  enum { MAXENV = 64 };
  char *envs[MAXENV];
  int nenv = 0;
  const char *outname = NULL;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      outname = argv[++i];
    } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
      timeout = atof(argv[++i]);
    } else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc && nenv < MAXENV) {
      envs[nenv++] = argv[++i];
    } else {
      break;
    }
  }
  if (i >= argc) {
    fprintf(stderr, "usage: runone [-o FILE] [-t SECONDS] [-e NAME=VALUE]... -- PROGRAM [ARG...]\n");
    return 2;
  }
  FILE *out = stderr;
  if (outname && !(out = fopen(outname, "w"))) {
    perror(outname);
    return 2;
  }

  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);

  double t0 = now();
  pid_t pid = fork();
  if (pid < 0) {
    perror("runone: fork");
    return 2;
  }
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    setpgid(0, 0);
    if (out != stderr) fclose(out);
    for (int e = 0; e < nenv; e++) putenv(envs[e]);
    execvp(argv[i], argv + i);
    fprintf(stderr, "runone: cannot run %s: %s\n", argv[i], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);

  int timed_out = 0;
  if (timeout > 0) {
    double deadline = t0 + timeout;
    for (;;) {
      /* wait for SIGCHLD or the deadline without reaping (wait4 reaps below) */
      siginfo_t si;
      memset(&si, 0, sizeof si);
      if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
        break;
      double left = deadline - now();
      if (left <= 0) {
        timed_out = 1;
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        break;
      }
      struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
      sigtimedwait(&chld, NULL, &ts);
    }
  }
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("runone: wait4");
      return 2;
    }
  }
  double wall = now() - t0;
  if (timed_out) kill(-pid, SIGKILL); /* stragglers of the group */
  fprintf(out,
          "runone: status=%d signal=%d timeout=%d wall_s=%.6f maxrss_kib=%ld minflt=%ld "
          "majflt=%ld utime_s=%.6f stime_s=%.6f\n",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0,
          timed_out, wall, ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, tv(ru.ru_utime),
          tv(ru.ru_stime));
  return fclose(out) == 0 ? 0 : 2;
}
