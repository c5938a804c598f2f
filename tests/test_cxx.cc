// C++ operator new/delete under hakmem: every form reaches hakmem, aligned
// forms are aligned, nothrow forms return nullptr, throwing forms throw
// std::bad_alloc after calling the new_handler, and containers work.
#include <dlfcn.h>

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
  handler_calls++;
  std::set_new_handler(nullptr);  // next failure throws
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

static void test_new_handler() {
  std::set_new_handler(handler);
  bool threw = false;
  try {
    void *p = ::operator new[](huge);
    ::operator delete[](p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw && handler_calls == 1, "new_handler not called once before bad_alloc");
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
    {"containers", test_containers},
};

int main(int argc, char **argv) { return RUN_CASES("cxx", cases, argc, argv); }
