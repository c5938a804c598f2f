/* hakmem: run a program with hakmem preloaded.
 *
 *   hakmem [--secure | --valgrind] [--profile P] [--prof BYTES] [--stats[=json]] [-o FILE] [--banner] [--] PROGRAM [ARG...]
 *   hakmem [--secure | --valgrind] --version | --options | --help
 *
 * The program is started with the shared library in LD_PRELOAD (before any
 * library already there) and the options as HAKMEM_* variables, by exec: its
 * exit status and signals are its own; the command's own failures (no
 * library) are status 125, as env's, apart from 126 and 127 (the program
 * cannot be run, or is not found). The library is the one beside this
 * command (a build tree: build/hakmem, build/libhakmem.so), else
 * libhakmem.so.N in the directory make install put it in (LIBDIR, compiled
 * into the installed command), else in ../lib, ../lib64 or ../lib/<multiarch>
 * of its directory (a prefix moved elsewhere); with --secure the secure
 * build's (build/secure/libhakmem-secure.so, libhakmem-secure.so.N,
 * installed by make install SECURE=1), with --valgrind the Valgrind-aware
 * build's (build/valgrind/libhakmem.so, hakmem/valgrind/libhakmem.so.N in
 * the library directory, installed by make install where valgrind's headers
 * are).
 *
 * The command itself runs on hakmem (it is linked with libhakmem.a), which is
 * where --options reads the table from, and which warns once about the
 * HAKMEM_* variables it cannot use; those are left out of the program's
 * environment, where they would be ignored the same way, so that the
 * program and its children do not warn again. The statistics file (-o)
 * is made absolute and emptied here, once: each process of the run appends
 * its own report (a program that changes directory still writes there). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hakmem.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define VERSION STR(HAKMEM_VERSION_MAJOR) "." STR(HAKMEM_VERSION_MINOR) "." STR(HAKMEM_VERSION_PATCH)
#define MAJOR STR(HAKMEM_VERSION_MAJOR)

static const char USAGE[] =
    "usage: hakmem [--secure | --valgrind] [--profile P] [--prof BYTES] [--stats[=json]] [-o FILE] [--banner] [--] PROGRAM "
    "[ARG...]";

static const char HELP[] =
    "Runs PROGRAM with the hakmem allocator preloaded (LD_PRELOAD); its exit\n"
    "status is PROGRAM's.\n"
    "\n"
    "  --secure         preload the secure build (docs/secure.md): checked free lists,\n"
    "                   guard pages, randomized placement\n"
    "  --valgrind       preload the build memcheck sees (docs/checkers.md), to run\n"
    "                   valgrind --soname-synonyms=somalloc=nouserintercepts PROGRAM\n"
    "  --profile P      auto (the default), fast, balanced or lean (HAKMEM_PROFILE)\n"
    "  --prof BYTES     heap profiling, a sample every BYTES allocated on average (512K);\n"
    "                   profiles hakmem.<pid>.<n>.heap for google-pprof at exit\n"
    "                   (HAKMEM_PROF_SAMPLE; docs/profiling.md)\n"
    "  --stats          print hakmem's statistics when the program exits (HAKMEM_STATS=1)\n"
    "  --stats=json     the same as one JSON object (HAKMEM_STATS=json)\n"
    "  -o FILE          the statistics go to FILE instead of stderr; implies --stats;\n"
    "                   every process of the run appends its report, named by its\n"
    "                   first line; %p in FILE becomes the process id (a file each)\n"
    "  --banner         describe hakmem's configuration on stderr at start-up, once\n"
    "  --options        list every option: values, defaults per profile, meaning\n"
    "  --version        print the version and the library that would be preloaded\n"
    "  --help           this text\n"
    "\n"
    "Any other option can be given as a HAKMEM_<NAME> variable (hakmem --options).\n"
    "Child processes of PROGRAM inherit the allocator and the options. Status 125:\n"
    "hakmem's library was not found.\n";

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

#define FAILED 125   /* the command's own failure */

static enum { DEFAULT, SECURE, VALGRIND } build;   /* --secure, --valgrind */

/* The places the library is looked for, in order: a directory (absolute,
 * or relative to this command's) and the file name there. */
#ifndef HAKMEM_LIBDIR
#define HAKMEM_LIBDIR ""
#endif
#ifndef HAKMEM_MULTIARCH
#define HAKMEM_MULTIARCH ""
#endif
static const char *const dirs[] = {".", HAKMEM_LIBDIR, "../lib", "../lib64", "../lib/" HAKMEM_MULTIARCH};

static const char *library_name(size_t dir) {
  static const char *const in_build[] = {"libhakmem.so", "secure/libhakmem-secure.so", "valgrind/libhakmem.so"};
  static const char *const installed[] = {"libhakmem.so." MAJOR, "libhakmem-secure.so." MAJOR,
                                          "hakmem/valgrind/libhakmem.so." MAJOR};
  return dir == 0 ? in_build[build] : installed[build];
}

/* The directory of this command into self; false if unknown. */
static bool own_dir(char *self, size_t size) {
  ssize_t n = readlink("/proc/self/exe", self, size - 1);
  if (n <= 0) return false;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (!slash) return false;
  *slash = '\0';
  return true;
}

/* dirs[i] as a directory path; NULL if it names none here. */
static const char *dir_path(size_t i, const char *self, char *buf, size_t size) {
  const char *d = dirs[i];
  if (!*d || (i == 4 && !*HAKMEM_MULTIARCH)) return NULL;
  if (d[0] == '/') return d;
  if ((size_t)snprintf(buf, size, "%s/%s", self, d) >= size) return NULL;
  return buf;
}

/* The shared library to preload; NULL if there is none. */
static const char *find_library(char *out, size_t size) {
  char self[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
  if (!own_dir(self, sizeof self)) return NULL;
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    const char *d = dir_path(i, self, dir, sizeof dir);
    if (!d || (size_t)snprintf(path, sizeof path, "%s/%s", d, library_name(i)) >= sizeof path) continue;
    if (access(path, R_OK) == 0 && realpath(path, out) && strlen(out) < size) return out;
  }
  return NULL;
}

/* What was looked for, and where, into f. */
static void print_searched(FILE *f) {
  char self[PATH_MAX], dir[PATH_MAX];
  bool known = own_dir(self, sizeof self);
  fprintf(f, "%s (looked in", library_name(1));
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    const char *d = known || dirs[i][0] == '/' ? dir_path(i, self, dir, sizeof dir) : NULL;
    if (d) fprintf(f, " %s", d);
  }
  static const char *const how[] = {"", "; make install SECURE=1 installs it",
                                    "; make install installs it where valgrind's headers are"};
  fprintf(f, ")%s", how[build]);
}

static const char *library_or_die(char *out, size_t size) {
  if (!find_library(out, size)) {
    fprintf(stderr, "hakmem: cannot find ");
    print_searched(stderr);
    fprintf(stderr, "\n");
    done(FAILED);
  }
  return out;
}

static void set(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0) {
    perror("hakmem: setenv");
    done(FAILED);
  }
}

/* The option "name=value" names (any case, up to its '='), or -1. */
static int option_named(const char *entry, size_t len) {
  for (int o = 0; o < hak_option_count; o++) {
    const char *name = hak_option_name((hak_option_t)o);
    if (strlen(name) == len && strncasecmp(entry, name, len) == 0) return o;
  }
  return -1;
}

/* Is "name=value" (name as the case asks) one the library takes? */
static bool accepted(const char *entry, bool any_case) {
  const char *eq = strchr(entry, '=');
  if (!eq) return false;
  int option = option_named(entry, (size_t)(eq - entry));
  if (option < 0 || (!any_case && strncmp(entry, hak_option_name((hak_option_t)option), (size_t)(eq - entry)) != 0))
    return false;
  return hak_option_set_text((hak_option_t)option, eq + 1) == 0;
}

/* HAKMEM_OPTIONS with the entries the library refused left out. */
static void keep_accepted_entries(const char *list) {
  char kept[4096] = "", entry[1024];
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    if (n && n < sizeof entry) {
      memcpy(entry, p, n);
      entry[n] = 0;
      if (accepted(entry, true) && strlen(kept) + n + 2 < sizeof kept) {
        if (*kept) strcat(kept, ",");
        strcat(kept, entry);
      }
    }
    p += n + (p[n] == ',');
  }
  if (*kept) set("HAKMEM_OPTIONS", kept);
  else unsetenv("HAKMEM_OPTIONS");
}

/* The HAKMEM_* variables the library warned about at this command's start
 * (unknown, or a value it refuses; in HAKMEM_OPTIONS, such entries) leave
 * the environment. */
static void drop_refused_options(void) {
  extern char **environ;
  const char *list = getenv("HAKMEM_OPTIONS");
  if (list) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", list);
    keep_accepted_entries(copy);
  }
  for (size_t i = 0; environ[i];) {
    const char *e = environ[i], *eq = strchr(e, '=');
    if (strncmp(e, "HAKMEM_", 7) != 0 || !eq || strncmp(e, "HAKMEM_OPTIONS=", 15) == 0 || accepted(e + 7, false)) {
      i++;
      continue;
    }
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(eq - e), e);
    unsetenv(name);
  }
}

/* -o FILE: absolute, and emptied unless each process writes its own (%p). */
static void stats_file(const char *file) {
  char path[PATH_MAX], cwd[PATH_MAX];
  if (file[0] != '/' && getcwd(cwd, sizeof cwd) &&
      (size_t)snprintf(path, sizeof path, "%s/%s", cwd, file) < sizeof path)
    file = path;
  if (!strstr(file, "%p")) {
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      fprintf(stderr, "hakmem: cannot write %s: %s\n", file, strerror(errno));
      done(FAILED);
    }
    close(fd);
  }
  set("HAKMEM_STATS_FILE", file);
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
    if (strcmp(arg, "--secure") == 0 || strcmp(arg, "--valgrind") == 0) {
      build = strcmp(arg, "--secure") == 0 ? SECURE : VALGRIND;
      continue;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      printf("%s\n\n%s", USAGE, HELP);
      done(0);
    }
    if (strcmp(arg, "--version") == 0) {
      printf("hakmem %s\nlibrary: ", VERSION);
      if (find_library(library, sizeof library)) {
        printf("%s\n", library);
      } else {
        printf("not found: ");
        print_searched(stdout);
        printf("\n");
      }
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
      set("HAKMEM_ROUTE_BANNER", "once");
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
  drop_refused_options();
  if (file) {
    stats_file(file);
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
      done(FAILED);
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
