#!/usr/bin/env bash
# Smoke test: real programs run under LD_PRELOAD=libhakmem.so must produce
# the same output and exit status as without it.
#
# Each case is a bash script run twice in a fresh scratch directory, once
# plainly and once preloaded (so every program it starts is preloaded too).
# Prints PASS/FAIL/SKIP smoke:<name> per case, then "RESULT smoke <passed>
# <failed>". BUILD (default build/) is where libhakmem.so lives.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
LIB="$(cd "$BUILD" 2>/dev/null && pwd)/libhakmem.so"
passed=0
failed=0

if [ ! -f "$LIB" ]; then
  echo "FAIL smoke: $LIB not found"
  echo "RESULT smoke 0 1"
  exit 1
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-smoke.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/src" "$T/bin"
export SRC="$T/src" BIN="$T/bin" REPO="$PWD"
export LC_ALL=C PYTHONHASHSEED=0

pass() { echo "PASS smoke:$1"; passed=$((passed + 1)); }
fail() { echo "FAIL smoke:$1: $2"; failed=$((failed + 1)); }
skip() { echo "SKIP smoke:$1 ($2 not installed)"; }

# have NAME PROGRAM...: true if every program is installed, else SKIP NAME.
have() {
  local name=$1 prog
  shift
  for prog in "$@"; do
    if ! command -v "$prog" >/dev/null 2>&1; then
      skip "$name" "$prog"
      return 1
    fi
  done
}

# run_case NAME: runs $SRC/NAME.sh plainly and preloaded and compares.
run_case() {
  local name=$1 ref="$T/$1.ref" out="$T/$1.out" rc_ref rc_out
  rm -rf "$T/work" && mkdir "$T/work"
  (cd "$T/work" && timeout 60 bash "$SRC/$name.sh") >"$ref" 2>&1
  rc_ref=$?
  rm -rf "$T/work" && mkdir "$T/work"
  (cd "$T/work" && LD_PRELOAD="$LIB" timeout 60 bash "$SRC/$name.sh") >"$out" 2>&1
  rc_out=$?
  if [ "$rc_ref" -ne 0 ]; then
    fail "$name" "reference run (without hakmem) exited $rc_ref"
    tail -n 20 "$ref" | sed 's/^/    /'
  elif [ "$rc_out" -ne 0 ] || ! cmp -s "$ref" "$out"; then
    fail "$name" "exit $rc_out under hakmem, output differs:"
    diff "$ref" "$out" | head -n 20 | sed 's/^/    /'
  else
    pass "$name"
  fi
}

# ---- case scripts and their inputs

cat >"$SRC/python3.sh" <<'EOF'
PYTHONMALLOC=malloc python3 - <<'PY'
import hashlib, json, random
from concurrent.futures import ThreadPoolExecutor

rng = random.Random(42)
data = [{"id": i, "name": "item%d" % i, "value": rng.random(),
         "tags": ["abcdef"[rng.randrange(6)] * rng.randint(1, 20)
                  for _ in range(rng.randint(0, 5))]}
        for i in range(50000)]
text = json.dumps(data, sort_keys=True)
assert json.loads(text) == data

def work(k):
    h, groups = hashlib.sha256(), {}
    for d in data[k::4]:
        groups.setdefault(d["name"][-2:], []).append(d["id"])
        h.update(("".join(d["tags"]) * 3).encode())
    for key in sorted(groups):
        h.update(("%s:%d" % (key, sum(groups[key]))).encode())
    return h.hexdigest()

with ThreadPoolExecutor(4) as ex:
    digests = list(ex.map(work, range(4)))
strings = [str(i) * (i % 7) for i in range(100000)]
print(len(text), hashlib.sha256(text.encode()).hexdigest())
print("\n".join(digests))
print(hashlib.md5("|".join(strings).encode()).hexdigest())
PY
EOF

cat >"$SRC/python3-dlopen.sh" <<'EOF'
PYTHONMALLOC=malloc python3 - <<'PY'
import ctypes, sqlite3, zlib

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(n) for n in range(1, 3000)]
for b in blocks:
    libc.free(b)
libm = ctypes.CDLL("libm.so.6")
libm.cos.restype = ctypes.c_double
libm.cos.argtypes = [ctypes.c_double]
print("%.12f" % libm.cos(1.0), libc.strlen(b"hello hakmem"))

data = b"".join(b"%d," % i for i in range(200000))
packed = zlib.compress(data, 9)
assert zlib.decompress(packed) == data
print(len(data), len(packed), zlib.crc32(packed))

db = sqlite3.connect(":memory:")
db.execute("create table t (k integer, v text)")
db.executemany("insert into t values (?, ?)",
               ((i % 97, "v%d" % i) for i in range(50000)))
for row in db.execute("select k, count(*), max(v) from t group by k "
                      "order by k limit 5"):
    print(row)
PY
EOF

cat >"$SRC/prog.cc" <<'EOF'
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

int main() {
  std::map<std::string, std::vector<int>> groups;
  std::unordered_map<unsigned, std::string> names;
  std::vector<std::unique_ptr<std::string>> owned;
  unsigned x = 12345;
  for (int i = 0; i < 200000; i++) {
    x = x * 1103515245u + 12345u;
    std::string key = "key" + std::to_string(x % 5000);
    groups[key].push_back(i);
    names[x % 20000] = key + std::string(x % 50, 'x');
    if (i % 10 == 0) owned.push_back(std::make_unique<std::string>(key));
  }
  size_t weight = 0;
  for (const auto &kv : groups) weight += kv.first.size() * kv.second.size();
  std::sort(owned.begin(), owned.end(),
            [](const auto &a, const auto &b) { return *a < *b; });
  int caught = 0;
  for (int i = 0; i < 1000; i++) {
    try {
      throw std::runtime_error("error " + std::to_string(i));
    } catch (const std::exception &e) {
      caught += e.what()[0] == 'e';
    }
  }
  std::ostringstream os;
  os << groups.size() << ' ' << names.size() << ' ' << weight << ' '
     << *owned.front() << ' ' << *owned.back() << ' ' << caught;
  std::cout << os.str() << std::endl;
}
EOF

cat >"$SRC/g++.sh" <<'EOF'
g++ -std=c++17 -O1 -o prog "$SRC/prog.cc" && ./prog
EOF

cat >"$SRC/gcc.sh" <<'EOF'
gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -I"$REPO/include" -I"$REPO/tests" \
  -c "$REPO/tests/test_api.c" -o api.o && md5sum <api.o
gcc -O2 -Wall -pthread -o mt "$SRC/mt.c" && md5sum <mt
EOF

cat >"$SRC/mt.c" <<'EOF'
/* Threads push blocks onto a shared stack and pop and free whatever is on
 * top, so blocks are freed by other threads. The output only depends on
 * the per-thread allocation sequences. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define ITEMS 20000

struct node {
  struct node *next;
  size_t len;
  unsigned char data[];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct node *stack;
static uint64_t allocated, freed, corrupt;

static void release(struct node *n) {
  for (size_t i = 0; i < n->len; i++)
    if (n->data[i] != (unsigned char)n->len) {
      corrupt++;
      break;
    }
  freed += n->len;
  free(n);
}

static void *run(void *arg) {
  uint64_t x = (uintptr_t)arg * 2654435761u + 1;
  for (int i = 0; i < ITEMS; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t len = 1 + x % 3000;
    struct node *n = i % 3 ? malloc(sizeof *n + len) : calloc(1, sizeof *n + len);
    if (i % 5 == 0) n = realloc(n, sizeof *n + len + 100);
    n->len = len;
    memset(n->data, (unsigned char)len, len);
    pthread_mutex_lock(&lock);
    allocated += len;
    n->next = stack;
    stack = n;
    if (i % 2) {
      struct node *top = stack;
      stack = top->next;
      release(top);
    }
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, run, (void *)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  while (stack) {
    struct node *n = stack;
    stack = n->next;
    release(n);
  }
  printf("allocated %llu freed %llu corrupt %llu\n", (unsigned long long)allocated,
         (unsigned long long)freed, (unsigned long long)corrupt);
  return corrupt != 0;
}
EOF

cat >"$SRC/threads.sh" <<'EOF'
"$BIN/mt"
EOF

cat >"$SRC/dlopen.c" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  void *h = dlopen("libm.so.6", RTLD_NOW);
  if (!h) {
    printf("dlopen failed: %s\n", dlerror());
    return 1;
  }
  double (*cosine)(double);
  *(void **)&cosine = dlsym(h, "cos");
  char *s = malloc(64);
  snprintf(s, 64, "cos(1) = %.12f", cosine(1.0));
  puts(s);
  free(s);
  dlclose(h);
  printf("missing library: %s\n", dlopen("libhakmem-missing.so", RTLD_NOW) ? "loaded" : "not found");
  return 0;
}
EOF

cat >"$SRC/dlopen.sh" <<'EOF'
"$BIN/dlopen"
EOF

cat >"$SRC/ctor.c" <<'EOF'
/* Allocates before main and frees after it, in an atexit handler and in a
 * destructor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *early, *table;

__attribute__((constructor(101))) static void init(void) {
  early = malloc(1000);
  strcpy(early, "allocated in a constructor");
  table = calloc(100, 100);
}

static void at_exit(void) {
  int zero = 1;
  for (int i = 0; i < 10000; i++) zero &= table[i] == 0;
  table = realloc(table, 1 << 20);
  memset(table, 1, 1 << 20);
  free(table);
  printf("atexit: table was %s\n", zero ? "zeroed" : "dirty");
}

__attribute__((destructor)) static void fini(void) {
  printf("destructor: %s\n", early);
  free(early);
  void *p = malloc(123);
  free(p);
  fflush(stdout);
}

int main(void) {
  atexit(at_exit);
  printf("main: %s\n", early);
  return 0;
}
EOF

cat >"$SRC/ctor.sh" <<'EOF'
"$BIN/ctor"
EOF

cat >"$SRC/git.sh" <<'EOF'
set -e
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=Smoke GIT_AUTHOR_EMAIL=smoke@example.com
export GIT_COMMITTER_NAME=Smoke GIT_COMMITTER_EMAIL=smoke@example.com
export GIT_AUTHOR_DATE=2024-01-01T00:00:00Z GIT_COMMITTER_DATE=2024-01-01T00:00:00Z
git init -q -b main repo
cd repo
for c in 1 2 3 4 5; do
  awk -v c="$c" 'BEGIN { for (f = 1; f <= 60; f++)
    for (i = 0; i < 200; i++) print f * c + i > ("file" f ".txt") }'
  mkdir -p "dir$c"
  seq 1 5000 | sed "s/^/line $c /" >"dir$c/big.txt"
  git add -A
  git commit -q -m "commit $c"
done
git log --stat
git gc -q
git fsck --no-progress
git count-objects -v | grep -E '^(count|in-pack|packs)'
git diff --shortstat HEAD~3
git rev-parse HEAD
EOF

cat >"$SRC/sort.sh" <<'EOF'
sort -S 50M -T . "$SRC/lines.txt" | md5sum
sort --parallel=2 -S 200M -T . "$SRC/lines.txt" | md5sum
sort -n -k2,2 --parallel=2 -T . "$SRC/lines.txt" | md5sum
EOF

cat >"$SRC/perl.sh" <<'EOF'
perl -e '
use strict; use warnings; use Digest::MD5 qw(md5_hex);
my (%h, $x); $x = 1;
for my $i (1 .. 200000) {
  $x = ($x * 69069 + 1) % 4294967296;
  push @{ $h{ sprintf "k%05d", $x % 50000 } }, $i;
}
my $s = join ",", map { "$_=" . scalar @{ $h{$_} } } sort keys %h;
(my $t = $s) =~ s/k0*(\d+)=(\d+)/$2:$1/g;
my @pairs = $t =~ /(\d+):(\d+)/g;
my $str = join "", map { chr(65 + $_ % 26) x ($_ % 9) } 1 .. 100000;
my $words = () = $str =~ /([AEIOU]+)/g;
print scalar(keys %h), " ", length $s, " ", md5_hex($t), " ", scalar @pairs, " ", $words, "\n";
'
EOF

cat >"$SRC/sqlite3.sh" <<'EOF'
sqlite3 smoke.db <"$SRC/load.sql"
sqlite3 smoke.db <<'SQL'
CREATE INDEX t_grp ON t(grp);
SELECT grp, count(*), sum(v), min(name), max(name) FROM t GROUP BY grp ORDER BY grp;
SELECT count(DISTINCT name), total(length(note)) FROM t;
SELECT name, v FROM t WHERE grp = 7 ORDER BY v DESC, name LIMIT 5;
PRAGMA integrity_check;
SQL
EOF

cat >"$SRC/node.sh" <<'EOF'
node -e '
const crypto = require("crypto");
let x = 1;
const rnd = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0);
const objs = [];
for (let i = 0; i < 200000; i++)
  objs.push({ id: i, s: "v" + rnd().toString(36), a: [rnd() % 100, rnd() % 1000] });
const groups = new Map();
for (const o of objs) groups.set(o.s.slice(0, 3), (groups.get(o.s.slice(0, 3)) || 0) + o.a[0]);
const json = JSON.stringify(objs);
const back = JSON.parse(json);
const bufs = [];
for (let i = 0; i < 2000; i++) bufs.push(Buffer.alloc(1000 + i * 10, i % 256));
const digest = crypto.createHash("sha256").update(json)
  .update(JSON.stringify([...groups.entries()].sort())).digest("hex");
console.log(back.length, groups.size, digest, bufs.reduce((s, b) => s + b.length, 0));
'
EOF

# ---- inputs generated once, without hakmem

awk 'BEGIN { x = 1; for (i = 0; i < 2000000; i++) {
  x = (x * 69069 + 1) % 4294967296
  printf "%d %08x line%d\n", x % 100000, x, i } }' >"$SRC/lines.txt"
awk -v q="'" 'BEGIN { x = 7
  print "CREATE TABLE t (grp INTEGER, v INTEGER, name TEXT, note TEXT);"
  print "BEGIN;"
  for (i = 0; i < 100000; i++) {
    x = (x * 69069 + 1) % 4294967296
    printf "INSERT INTO t VALUES (%d, %d, %sn%d%s, %s%0" (1 + x % 60) "d%s);\n",
      x % 50, x % 100003, q, x % 20011, q, q, 0, q
  }
  print "COMMIT;" }' >"$SRC/load.sql"

# ---- the cases

have python3 python3 && run_case python3
have python3-dlopen python3 && run_case python3-dlopen
have g++ g++ && run_case g++
if have gcc gcc; then
  run_case gcc
  gcc -O2 -pthread -o "$BIN/mt" "$SRC/mt.c" && run_case threads
  gcc -O2 -o "$BIN/dlopen" "$SRC/dlopen.c" -ldl && run_case dlopen
  gcc -O2 -o "$BIN/ctor" "$SRC/ctor.c" && run_case ctor
else
  skip threads gcc
  skip dlopen gcc
  skip ctor gcc
fi
have git git && run_case git
run_case sort
have perl perl && run_case perl
have sqlite3 sqlite3 && run_case sqlite3
have node node && run_case node

echo "RESULT smoke $passed $failed"
[ "$failed" -eq 0 ]
