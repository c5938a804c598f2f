// cxx_churn [ITERS] [KEYS] [THREADS] [SEED]
//
// C++ container churn through operator new/delete. THREADS threads (default
// 2) each run ITERS operations (default 1500000) on their own
// std::map<std::string, std::vector<uint32_t>> with up to KEYS (default 5000)
// keys -- strings of 16..80 characters, too long for the small-string
// buffer: push_back to a key's vector, erase a key, look a key up, replace a
// vector, build a temporary string by concatenation. Every vector holds
// copies of its key's number; it is checked whenever touched.
// Prints operations per second.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

static volatile uint64_t sink;

static uint64_t rng_next(uint64_t &s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 0x2545F4914F6CDD1Dull;
}

static std::string make_key(uint32_t k) {
  std::string s = "key-" + std::to_string(k) + "-";
  s.append(16 + k % 64 - (s.size() < 16 ? s.size() : 16), static_cast<char>('a' + k % 26));
  return s;
}

static uint32_t key_number(const std::string &s) {
  return static_cast<uint32_t>(std::strtoul(s.c_str() + 4, nullptr, 10));
}

[[noreturn]] static void corrupt(const char *what) {
  std::fprintf(stderr, "cxx_churn: CORRUPTION: %s\n", what);
  std::exit(3);
}

static void check(const std::string &key, const std::vector<uint32_t> &v) {
  uint32_t k = key_number(key);
  if (key != make_key(k)) corrupt("key string");
  for (uint32_t x : v)
    if (x != k) corrupt("vector element");
}

static void worker(long iters, uint32_t keys, uint64_t seed, uint64_t *out) {
  std::map<std::string, std::vector<uint32_t>> m;
  uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1, sum = 0;
  for (long i = 0; i < iters; i++) {
    uint64_t r = rng_next(rng);
    uint32_t k = static_cast<uint32_t>(r % keys);
    std::string key = make_key(k);
    switch ((r >> 32) % 10) {
      case 0: case 1: case 2: case 3: {
        std::vector<uint32_t> &v = m[key];
        if (v.size() >= 256) {
          check(key, v);
          std::vector<uint32_t>().swap(v);
        }
        v.push_back(k);
        break;
      }
      case 4: case 5: {
        auto it = m.find(key);
        if (it != m.end()) {
          check(it->first, it->second);
          sum += it->second.size();
          m.erase(it);
        }
        break;
      }
      case 6: case 7: {
        auto it = m.find(key);
        if (it != m.end()) {
          check(it->first, it->second);
          sum += it->second.size();
        }
        break;
      }
      case 8: {
        std::vector<uint32_t> v((r >> 48) % 200, k);
        m[key] = std::move(v);
        break;
      }
      default: {
        std::string s = key + "/" + key + "/" + std::to_string(r);
        if (s.compare(0, key.size(), key) != 0) corrupt("concatenation");
        sum += s.size();
        break;
      }
    }
  }
  for (auto &e : m) check(e.first, e.second);
  *out = sum + m.size();
}

static long arg(int argc, char **argv, int i, long def) {
  if (i >= argc) return def;
  char *end;
  long v = std::strtol(argv[i], &end, 0);
  if (*argv[i] == '\0' || *end != '\0') {
    std::fprintf(stderr, "cxx_churn: argument %d is not a number\n", i);
    std::exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc > 5 || (argc > 1 && argv[1][0] == '-' && argv[1][1] == 'h') ||
      (argc > 1 && std::string(argv[1]) == "--help")) {
    std::fprintf(stderr, "usage: cxx_churn [ITERS] [KEYS] [THREADS] [SEED]\n");
    return 2;
  }
  long iters = arg(argc, argv, 1, 1500000);
  long keys = arg(argc, argv, 2, 5000);
  long nthreads = arg(argc, argv, 3, 2);
  long seed = arg(argc, argv, 4, 1);
  if (iters <= 0 || keys <= 0 || keys > (1L << 30) || nthreads <= 0 || nthreads > 1024) {
    std::fprintf(stderr, "cxx_churn: bad arguments\n");
    return 2;
  }
  std::vector<uint64_t> sums(static_cast<size_t>(nthreads));
  std::vector<std::thread> threads;
  auto t0 = std::chrono::steady_clock::now();
  for (long t = 0; t < nthreads; t++)
    threads.emplace_back(worker, iters, static_cast<uint32_t>(keys),
                         static_cast<uint64_t>(seed * 1000 + t), &sums[static_cast<size_t>(t)]);
  for (auto &th : threads) th.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t sum = 0;
  for (uint64_t s : sums) sum += s;
  sink = sum;
  long total = iters * nthreads;
  std::printf("cxx_churn: %ld threads, %ld ops in %.3f s = %.0f ops/s\n", nthreads, total, secs,
              static_cast<double>(total) / secs);
  return 0;
}
