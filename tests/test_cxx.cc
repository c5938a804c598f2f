// C++ operator new/delete under hakmem: every form reaches hakmem, aligned
// forms are aligned, nothrow forms return nullptr, throwing forms throw
// std::bad_alloc after calling the new_handler until it is removed, a handler
// that frees memory makes the retry succeed, and containers work.
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "check.h"

static bool from_hakmem(void *fn) {
  Dl_info info;
  return dladdr(fn, &info) && info.dli_fname && std::strstr(info.dli_fname, "libhakmem");
}

struct alignas(256) Wide {
  char bytes[300];
};

static int handler_calls;
static void handler() {
  if (++handler_calls == 3) std::set_new_handler(nullptr);  // the next failure throws
}

// Frees a reserve the size of the allocation that failed, so that the retry
// fits under the address-space limit.
static void *reserve;
static void free_reserve() {
  handler_calls++;
  ::operator delete(reserve);
  reserve = nullptr;
  std::set_new_handler(nullptr);
}

static void test_from_hakmem() {
  CHECK(from_hakmem(reinterpret_cast<void *>(static_cast<void *(*)(std::size_t)>(&::operator new))),
        "operator new is not hakmem's");
  CHECK(from_hakmem(reinterpret_cast<void *>(static_cast<void (*)(void *) noexcept>(&::operator delete))),
        "operator delete is not hakmem's");
}

static void test_plain() {
  int *one = new int(42);
  CHECK(*one == 42 && hak_usable_size(one) >= sizeof(int), "new int");
  delete one;
  int *arr = new int[1000]();
  bool zero = true;
  for (int i = 0; i < 1000; i++) zero = zero && arr[i] == 0;
  CHECK(zero && hak_usable_size(arr) >= 4000, "new int[] value-initialised");
  delete[] arr;
}

static void test_aligned() {
  for (int i = 0; i < 100; i++) {
    Wide *w = new Wide;
    CHECK(reinterpret_cast<std::uintptr_t>(w) % 256 == 0, "aligned new not aligned");
    std::memset(w->bytes, i, sizeof w->bytes);
    delete w;
  }
  Wide *wa = new Wide[7];
  CHECK(reinterpret_cast<std::uintptr_t>(wa) % 256 == 0, "aligned new[] not aligned");
  delete[] wa;
  void *big_aligned = ::operator new(5000, std::align_val_t(1 << 16));
  CHECK(reinterpret_cast<std::uintptr_t>(big_aligned) % (1 << 16) == 0, "64 KiB aligned new");
  ::operator delete(big_aligned, std::align_val_t(1 << 16));
  void *sized = ::operator new(96);
  ::operator delete(sized, 96);
}

static const std::size_t huge = std::size_t(1) << 62;

static void test_nothrow() {
  void *nt = ::operator new(huge, std::nothrow);
  CHECK(nt == nullptr, "nothrow new of 2^62 bytes returned memory");
  void *nta = ::operator new(huge, std::align_val_t(64), std::nothrow);
  CHECK(nta == nullptr, "aligned nothrow new of 2^62 bytes returned memory");
}

static void test_bad_alloc() {
  bool threw = false;
  try {
    void *p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw, "new of 2^62 bytes did not throw std::bad_alloc");
}

// Every form calls the handler until it is removed (3 times here), then
// throws or returns nullptr.
template <typename Alloc>
static void handler_loop(const char *form, bool nothrow, Alloc alloc) {
  handler_calls = 0;
  std::set_new_handler(handler);
  bool threw = false;
  void *p = nullptr;
  try {
    p = alloc();
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(handler_calls == 3 && p == nullptr && threw != nothrow, "%s: %d handler calls, %s", form, handler_calls,
        threw ? "threw" : "returned");
}

static void test_new_handler() {
  handler_loop("new", false, [] { return ::operator new(huge); });
  handler_loop("new[]", false, [] { return ::operator new[](huge); });
  handler_loop("aligned new", false, [] { return ::operator new(huge, std::align_val_t(64)); });
  handler_loop("nothrow new", true, [] { return ::operator new(huge, std::nothrow); });
  handler_loop("aligned nothrow new[]", true,
               [] { return ::operator new[](huge, std::align_val_t(4096), std::nothrow); });
}

// The handler frees memory and the retry succeeds: in a child holding a
// 64 MiB reserve, whose address space is limited to what it maps and 32 MiB
// more, a second 64 MiB new fails until the handler frees the reserve. A
// hard limit that leaves no room for that skips the test (exit 6).
static void test_new_handler_retry() {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    rlimit lim;
    getrlimit(RLIMIT_AS, &lim);
    long mapped = vm_bytes();
    if (mapped < 0) _exit(7);
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < (rlim_t)mapped + (96 << 20)) _exit(6);
    reserve = ::operator new(64 << 20, std::nothrow);
    if (!reserve) _exit(6);
    std::memset(reserve, 1, 4096);
    lim.rlim_cur = (rlim_t)vm_bytes() + (32 << 20);
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(3);
    handler_calls = 0;
    std::set_new_handler(free_reserve);
    char *p = nullptr;
    try {
      p = new char[64 << 20];
    } catch (const std::bad_alloc &) {
      _exit(4);
    }
    std::memset(p, 2, 64 << 20);
    bool ok = handler_calls == 1 && reserve == nullptr && p[(64 << 20) - 1] == 2;
    delete[] p;
    _exit(ok ? 0 : 5);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 6) {
    std::printf("skip new_handler_retry: the hard RLIMIT_AS leaves no room for the test\n");
    return;
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "new after a handler that frees memory: child exit %d, signal %d (exit 3: setrlimit, 4: bad_alloc, 5: the "
        "handler's calls or the block, 7: /proc/self/statm unreadable)",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void test_containers() {
  std::map<std::string, std::vector<int>> m;
  for (int i = 0; i < 20000; i++) m[std::to_string(i * 7919 % 20000)].assign(i % 50, i);
  long sum = 0;
  for (auto &kv : m)
    for (int v : kv.second) sum += v;
  long expect = 0;
  for (int i = 0; i < 20000; i++) expect += long(i % 50) * i;
  CHECK(m.size() == 20000 && sum == expect, "map/string/vector churn");
}

static const test_case_t cases[] = {
    {"from_hakmem", test_from_hakmem},
    {"plain", test_plain},
    {"aligned", test_aligned},
    {"nothrow", test_nothrow},
    {"bad_alloc", test_bad_alloc},
    {"new_handler", test_new_handler},
    {"new_handler_retry", test_new_handler_retry},
    {"containers", test_containers},
};

int main(int argc, char **argv) { return RUN_CASES("cxx", cases, argc, argv); }
