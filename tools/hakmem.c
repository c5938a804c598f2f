/* hakmem: run a program with hakmem preloaded.
 *
 *   hakmem [--secure] [--profile P] [--prof BYTES] [--stats[=json]] [-o FILE] [--banner] [--] PROGRAM [ARG...]
 *   hakmem [--secure] --version | --options | --help
 *
 * The program is started with the shared library in LD_PRELOAD (before any
 * library already there) and the options as HAKMEM_* variables, by exec: its
 * exit status and signals are its own. The library is the one beside this
 * command (a build tree: build/hakmem, build/libhakmem.so) or in ../lib of
 * its directory (an installed prefix: bin/hakmem, lib/libhakmem.so.N); with
 * --secure the secure build's (build/secure/libhakmem-secure.so, or
 * lib/libhakmem-secure.so.N, installed by make install SECURE=1). The
 * command itself runs on hakmem (it is linked with libhakmem.a), which is
 * where --options reads the table from. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hakmem.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define VERSION STR(HAKMEM_VERSION_MAJOR) "." STR(HAKMEM_VERSION_MINOR) "." STR(HAKMEM_VERSION_PATCH)
#define MAJOR STR(HAKMEM_VERSION_MAJOR)

static const char USAGE[] =
    "usage: hakmem [--secure] [--profile P] [--prof BYTES] [--stats[=json]] [-o FILE] [--banner] [--] PROGRAM "
    "[ARG...]";

static const char HELP[] =
    "Runs PROGRAM with the hakmem allocator preloaded (LD_PRELOAD); its exit\n"
    "status is PROGRAM's.\n"
    "\n"
    "  --secure         preload the secure build (docs/secure.md): checked free lists,\n"
    "                   guard pages, randomized placement\n"
    "  --profile P      auto (the default), fast, balanced or lean (HAKMEM_PROFILE)\n"
    "  --prof BYTES     heap profiling, a sample every BYTES allocated on average (512K);\n"
    "                   profiles hakmem.<pid>.<n>.heap for google-pprof at exit\n"
    "                   (HAKMEM_PROF_SAMPLE; docs/profiling.md)\n"
    "  --stats          print hakmem's statistics when the program exits (HAKMEM_STATS=1)\n"
    "  --stats=json     the same as one JSON object (HAKMEM_STATS=json)\n"
    "  -o FILE          the statistics go to FILE instead of stderr; implies --stats;\n"
    "                   %p in FILE becomes the process id (a report per process)\n"
    "  --banner         describe hakmem's configuration on stderr at start-up\n"
    "  --options        list every option: values, defaults per profile, meaning\n"
    "  --version        print the version and the library that would be preloaded\n"
    "  --help           this text\n"
    "\n"
    "Any other option can be given as a HAKMEM_<NAME> variable (hakmem --options).\n"
    "Child processes of PROGRAM inherit the allocator and the options.\n";

/* The command ends by _exit: its own statistics, which HAKMEM_STATS in its
 * environment may ask for, are not the program's. */
static _Noreturn void done(int status) {
  fflush(stdout);
  _exit(status);
}

static _Noreturn void usage_error(const char *what, const char *arg) {
  fprintf(stderr, "hakmem: %s%s%s\n%s\n", what, arg ? " " : "", arg ? arg : "", USAGE);
  done(2);
}

static void write_stdout(const char *text, void *arg) {
  (void)arg;
  fputs(text, stdout);
}

static int secure;   /* --secure: the secure build's library */

/* The shared library to preload, found from this command's own path; NULL
 * if there is none. */
static const char *find_library(char *out, size_t size) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return NULL;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (!slash) return NULL;
  *slash = '\0';
  const char *candidates[] = {secure ? "/secure/libhakmem-secure.so" : "/libhakmem.so",
                              secure ? "/../lib/libhakmem-secure.so." MAJOR : "/../lib/libhakmem.so." MAJOR};
  for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s%s", self, candidates[i]) >= sizeof path) continue;
    if (access(path, R_OK) == 0 && realpath(path, out) && strlen(out) < size) return out;
  }
  return NULL;
}

static const char *library_or_die(char *out, size_t size) {
  if (!find_library(out, size)) {
    fprintf(stderr, "hakmem: cannot find %s beside this command or in its ../lib\n",
            secure ? "libhakmem-secure.so (make secure; make install SECURE=1)" : "libhakmem.so");
    done(127);
  }
  return out;
}

static void set(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0) {
    perror("hakmem: setenv");
    done(127);
  }
}

/* The value of "--name=value" or "--name value"; NULL if arg is not --name. */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  const char *arg = argv[*i];
  if (strncmp(arg, name, n) != 0) return NULL;
  if (arg[n] == '=') return arg + n + 1;
  if (arg[n] != '\0') return NULL;
  if (*i + 1 >= argc) usage_error(name, "needs a value");
  return argv[++*i];
}

int main(int argc, char **argv) {
  char library[PATH_MAX];
  const char *stats = NULL, *file = NULL, *value;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(arg, "--secure") == 0) {
      secure = 1;
      continue;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      printf("%s\n\n%s", USAGE, HELP);
      done(0);
    }
    if (strcmp(arg, "--version") == 0) {
      printf("hakmem %s\nlibrary: %s\n", VERSION, find_library(library, sizeof library) ? library : "(not found)");
      done(0);
    }
    if (strcmp(arg, "--options") == 0) {
      hak_options_print(write_stdout, NULL);
      done(0);
    }
    if (strcmp(arg, "--stats") == 0) {
      stats = "1";
    } else if (strcmp(arg, "--stats=json") == 0) {
      stats = "json";
    } else if (strcmp(arg, "--banner") == 0) {
      set("HAKMEM_ROUTE_BANNER", "1");
    } else if ((value = option_value(argc, argv, &i, "--profile"))) {
      if (hak_option_set_text(hak_option_profile, value) != 0) usage_error("unknown profile", value);
      set("HAKMEM_PROFILE", value);
    } else if ((value = option_value(argc, argv, &i, "--prof"))) {
      if (hak_option_set_text(hak_option_prof_sample, value) != 0) usage_error("--prof needs a size, not", value);
      set("HAKMEM_PROF_SAMPLE", value);
    } else if ((value = option_value(argc, argv, &i, "-o"))) {
      if (!*value) usage_error("-o", "needs a file name");
      file = value;
    } else {
      usage_error("unknown option", arg);
    }
  }
  if (i >= argc) usage_error("no program to run", NULL);
  if (file) {
    set("HAKMEM_STATS_FILE", file);
    if (!stats) stats = "1";
  }
  if (stats) set("HAKMEM_STATS", stats);

  library_or_die(library, sizeof library);
  const char *old = getenv("LD_PRELOAD");
  if (old && *old) {
    size_t n = strlen(library) + 1 + strlen(old) + 1;
    char *both = malloc(n);
    if (!both) {
      perror("hakmem");
      done(127);
    }
    snprintf(both, n, "%s:%s", library, old);
    set("LD_PRELOAD", both);
  } else {
    set("LD_PRELOAD", library);
  }
  execvp(argv[i], argv + i);
  int e = errno;
  fprintf(stderr, "hakmem: cannot run %s: %s\n", argv[i], strerror(e));
  done(e == ENOENT ? 127 : 126);
}
