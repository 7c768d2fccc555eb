#include "framework/ops/blas.hpp"

#include "framework/ops/product_clock.hpp"
#include "framework/ops/simd.hpp"

#include <cblas.h>
#include <libxsmm.h>
#include <libxsmm_generator.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

extern "C" {
char* openblas_get_corename(void);
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}

namespace attnlab {

std::string blas_core_name() { return openblas_get_corename(); }

std::string cpu_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char name[13] = {};
    std::memcpy(name, &ebx, 4), std::memcpy(name + 4, &edx, 4), std::memcpy(name + 8, &ecx, 4);  // the vendor's 12 letters
    return name;
  }
#endif
  return "unknown";
}

std::string compiler_name() {
#if defined(__clang__)
  return "clang " + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__) + "." + std::to_string(__clang_patchlevel__);
#elif defined(__GNUC__)
  return "GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." + std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

std::string better_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  const std::string current = blas_core_name();
  const bool generic = current == "Prescott" || current == "Core2" || current == "Nehalem" || current == "Sandybridge" ||
                       current == "Katmai" || current == "Northwood" || current == "Banias" || current == "Atom";
  if (!generic) return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return current == "Haswell" ? "" : "Haswell";
  return "";
}

void reexec_with_blas_core(char** argv) {
  const std::string core = better_blas_core();
  // OpenBLAS starts its own threads when it loads, one per core but the first, unless
  // OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) says otherwise; set to one thread later they stay and poll for work with
  // sched_yield (2.7% of a core during a one-thread training step), competing with attnlab's pool for
  // the cores. attnlab never gives OpenBLAS more than one thread (parallel.hpp), so it needs none.
  const bool blas_threads_unset = !std::getenv("OPENBLAS_NUM_THREADS");
  if (core.empty() && !blas_threads_unset) return;
  if (!core.empty()) setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  if (blas_threads_unset) setenv("OPENBLAS_NUM_THREADS", "1", 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on as we are rather than stop.
}

bool openblas_has_small_kernels() {
  // Cooperlake's and SapphireRapids's kernel sets are SkylakeX's for sgemm (perf names
  // sgemm_small_kernel_b0_nn_COOPERLAKE for a 32^3 product, as fast as SkylakeX's).
  static const bool small = [] {
    const std::string core = blas_core_name();
    return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  }();
  return small;
}

namespace {

bool has_avx512() {
  static const bool avx512 = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"));
  return avx512;
}

// The AMD CPU family with AVX-512 this is (0x19 Zen 4, 0x1A Zen 5; family 0x19 is Zen 3 too, which has no
// AVX-512), or 0 for any other CPU.
unsigned amd_avx512_family() {
  static const unsigned family = [] {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (cpu_vendor() != "AuthenticAMD" || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0u;
    const unsigned base = (eax >> 8) & 0xF, extended = base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
    return has_avx512() ? extended : 0u;
#else
    return 0u;
#endif
  }();
  return family;
}

}  // namespace

LibxsmmStepProducts libxsmm_step_products() {
  constexpr std::size_t kToyStepLargest = 2048 * 256 * 64;  // 2^25 multiply-adds (bench_gemm's toy step)
  if (amd_avx512_family() == 0x19) return {kToyStepLargest, kToyStepLargest, LibxsmmStepProducts::kAny};
  if (amd_avx512_family() == 0x1A) return {2 * kToyStepLargest, kToyStepLargest, 1024};
  if (cpu_vendor() == "GenuineIntel" && has_avx512()) {
    LibxsmmStepProducts intel{2 * kToyStepLargest, kToyStepLargest, 2048};
    intel.widest = 128, intel.tallest_weight_gradient = 192, intel.widest_weight_gradient = 128;
    return intel;
  }
  return {};
}

bool libxsmm_takes_step_products() { return libxsmm_step_products().largest > 0; }

std::size_t bt_copy_ld(std::size_t n) { return (n + 15) / 16 * 16; }

bool onednn_takes_bt_copies() { return amd_avx512_family() == 0x19; }

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
int blas_threads() { return openblas_get_num_threads(); }

namespace {

// Empty products: cblas rejects a leading dimension of 0, which an empty operand can have. With no
// inner dimension, C = beta C (and exactly 0 when beta is 0, whatever C held).
template <class T>
bool empty_product(std::size_t m, std::size_t n, std::size_t k, T* c, std::size_t ldc, T beta) {
  if (m == 0 || n == 0) return true;
  if (k > 0) return false;
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  return true;
}

// Whether OpenBLAS runs a float product through its SkylakeX small-matrix kernels, which take beta = 0
// themselves (their b0 variants write C without reading it). Its permit, in its column-major terms (a
// row-major call is C^T = op(B)^T op(A)^T: its transa is our tb, its M our n): M N K <= 100^3, and for
// TN M N <= 1200 and K >= 32, for TT K >= 4.
bool openblas_small_kernel(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k) {
  if (!openblas_has_small_kernels() || static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) > 1e6)
    return false;
  if (tb && !ta) return m * n <= 1200 && k >= 32;
  if (tb && ta) return k >= 4;
  return true;
}

// For beta = 0 OpenBLAS's general path first zeroes C with its own beta kernel, then adds the product:
// zeroing C with memset and asking for C + op(A) op(B) is faster (measured here with OpenBLAS 0.3.21's
// Zen kernels, one thread: 768x384x128 NT 938 -> 860 us, 512x192x64 NT 177 -> 152 us, 64x4096x32 NT
// 330 -> 260 us; never slower). The result is the same product (an exact -0 can come out as +0). Its
// small-matrix kernels need no memset (`small`): beta = 0 goes to them as it is.
template <class T>
T zero_then_accumulate(std::size_t m, std::size_t n, T* c, std::size_t ldc, T beta, bool small = false) {
  if (beta != T(0) || small) return beta;
  if (ldc == n) {
    std::memset(c, 0, m * n * sizeof(T));
  } else {
    for (std::size_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, n * sizeof(T));
  }
  return T(1);
}

// oneDNN runs a product on as many threads as OpenMP would give a parallel region opened by the calling
// thread (omp_get_max_threads(), two here unless OMP_NUM_THREADS says otherwise). attnlab's pool is the
// only one (parallel.hpp): each thread that multiplies asks OpenMP for one thread, once.
void one_openmp_thread() {
  thread_local const bool asked = (omp_set_num_threads(1), true);
  (void)asked;
}

constexpr std::size_t kSmallProduct = 64 * 64 * 64;  // multiply-adds

// libxsmm is column-major: the row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so a
// kernel takes B first (M = n, N = m, A' = B, B' = A) and a transposed A is its transposed B'. Its JIT
// generator has no transposed A' (our transposed B), and takes beta 0 or 1 only.
using SmallKernel = void (*)(const float* b, const float* a, float* c);
bool libxsmm_takes_beta(float beta) { return beta == 0.0f || beta == 1.0f; }

// The kernels libxsmm's generator writes, one per shape, leading dimensions, transposition and beta, kept
// for the process in pages of their own. attnlab runs the generator itself rather than through
// libxsmm_smmdispatch: libxsmm_init() allocates and clears a registry for 131072 kernels (11 MB resident,
// measured with libxsmm 1.17: more than the whole toy step's working memory), where a step has a few
// dozen. The same generator and descriptor give the same code (the same bits as libxsmm_smmdispatch's
// kernels, checked on four shapes), about 2.5 KB a kernel.
class JitKernels {
 public:
  using Shape = std::array<std::size_t, 7>;  // m, n, k, lda, ldb, ldc, ta | accumulate << 1

  SmallKernel get(const Shape& shape) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = kernels_.find(shape);
    if (found != kernels_.end()) return found->second;
    return kernels_[shape] = generate(shape);
  }

 private:
  SmallKernel generate(const Shape& s) {
    const auto dim = [](std::size_t x) { return static_cast<libxsmm_blasint>(x); };
    const bool ta = s[6] & 1, accumulate = s[6] & 2;
    libxsmm_descriptor_blob blob;
    const libxsmm_gemm_descriptor* descriptor =
        libxsmm_sgemm_descriptor_init(&blob, dim(s[1]), dim(s[0]), dim(s[2]), dim(s[4]), dim(s[3]), dim(s[5]), 1.0f,
                                      accumulate ? 1.0f : 0.0f, ta ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE,
                                      LIBXSMM_PREFETCH_NONE);
    if (!descriptor) return nullptr;
    libxsmm_generated_code code{};
    code.generated_code = buffer_.data();
    code.buffer_size = static_cast<unsigned>(buffer_.size());
    code.code_type = 2;  // machine code, to be copied into executable memory
    code.arch = static_cast<unsigned>(arch_);
    libxsmm_generator_gemm_kernel(&code, descriptor);
    if (code.last_error != 0 || code.code_size == 0) return nullptr;
    void* page = mmap(nullptr, code.code_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return nullptr;
    std::memcpy(page, buffer_.data(), code.code_size);
    if (mprotect(page, code.code_size, PROT_READ | PROT_EXEC) != 0) {
      munmap(page, code.code_size);
      return nullptr;
    }
    return reinterpret_cast<SmallKernel>(page);
  }

  std::mutex mutex_;
  std::map<Shape, SmallKernel> kernels_;  // null where the generator wrote none
  std::vector<unsigned char> buffer_ = std::vector<unsigned char>(std::size_t(1) << 17);  // libxsmm's largest kernel
  int arch_ = libxsmm_cpuid();  // the instruction set it writes for (AVX2, AVX-512, ...)
};

// The kernel for a product; null where the generator has none. Each thread keeps the last few it used,
// which spares the lock and the look-up.
SmallKernel small_kernel(bool ta, std::size_t m, std::size_t n, std::size_t k, std::size_t lda, std::size_t ldb,
                         std::size_t ldc, bool accumulate) {
  struct Entry {
    JitKernels::Shape shape{};
    SmallKernel kernel = nullptr;
  };
  thread_local std::array<Entry, 8> recent;
  thread_local std::size_t next = 0;
  const JitKernels::Shape shape{m, n, k, lda, ldb, ldc, std::size_t(ta) | std::size_t(accumulate) << 1};
  for (const Entry& e : recent)
    if (e.kernel && e.shape == shape) return e.kernel;
  static JitKernels kernels;
  const SmallKernel kernel = kernels.get(shape);
  if (kernel) recent[next++ % recent.size()] = Entry{shape, kernel};
  return kernel;
}

}  // namespace

// Three libraries share the float products, each where it was measured fastest (one thread):
// - Small products (m n k <= 64^3: the delta rules' and linear attention's chunk blocks) that are not A B^T,
//   with beta 0 or 1: OpenBLAS where its kernel set has small-matrix kernels (SkylakeX's), which beat
//   oneDNN's on all but A B^T (AVX-512, 2026-11-27, a standalone loop per shape, best of five, time oneDNN /
//   OpenBLAS with its memset of C: 32x32x32 NN 1.25, TN 1.65, NT 0.64; 64x32x32 NN 1.21, TN 1.28, NT 0.76;
//   64x64x64 NN 1.06, TN 1.12, NT 0.84; at 4096 tokens all-oneDNN products made delta take 1.42x linear
//   attention's time, all-OpenBLAS 1.08-1.14x); elsewhere libxsmm's kernels, compiled for each shape.
//   OpenBLAS's other kernel sets (Zen, Haswell) pack both operands even of a 32^3 product: on an AVX2 Zen 3
//   (2026-12-02, a standalone loop of each chunk product of `bench attention --variants delta`, best of five,
//   warm caches) libxsmm ran 1.5-2.2x OpenBLAS's and 1.2-2.2x oneDNN's speed: 32x32x32 NN 0.76-0.85 us
//   against OpenBLAS's 1.31-1.90 and oneDNN's 1.26-1.75; 64x32x32 NN 1.52 against 3.10 and 1.95; 32x32x32 TN
//   0.77 against 1.23 and 1.08. On an AMD Zen 4 (AVX-512, 2026-12-02, `bench attention --causal --threads 1`,
//   OpenBLAS's small-matrix kernels against libxsmm's, four alternated rounds at 4096 tokens, three at 16384)
//   the two were even on the delta rules (delta 12.80 against 12.69 ms, 55.3 against 54.4) and OpenBLAS's
//   ahead on linear attention (11.7 against 12.4 ms, 53.2 against 54.8), so they stay with OpenBLAS there
//   too.
// - On a Zen 4 or a Zen 5, the products of a training step's sizes (step_sized_product, within
//   libxsmm_step_products()'s bounds), except A^T B^T: libxsmm's kernels, A B^T through a copy of B^T.
//   On the Zen 4, those up to 2^25 multiply-adds (the toy step's largest, 2048 x 256 x 64):
//   `bench_gemm --benchmark_filter=/t1/` ran the toy step's products 1.17x OpenBLAS's speed on libxsmm,
//   1.10x on oneDNN's sgemm, and the GPT's 1.12x and 1.09x; in whole steps (`bench gpt`, alternated
//   rounds, tokens/s) the toy 120.9k -> 129.4k on one thread (five) and 183.2k -> 203.8k on two (four),
//   the GPT (whose larger products stay on oneDNN; all of them on libxsmm was even) 17.3k -> 17.8k and
//   30.4k -> 31.3k. On the Zen 5 (2026-12-02) libxsmm's kernels were 1.11x and oneDNN's
//   sgemm 1.09x OpenBLAS's on the toy step's products, but slower than oneDNN on the weight gradients summed
//   over 2048 rows (256x64x2048 163 against 181 GFLOP/s, 64x256x2048 133 against 200) and on the GPT's
//   128x512x768 (131 against 205), and faster on the GPT's A B and A B^T up to 2^26 (768x128x512 NN 217
//   against 213, NT 214 against 202): there those go to libxsmm, and the weight gradients up to 2^25 summed
//   over at most 1024 rows. Whole steps, alternated: the default experiment's shape (`bench gpt --layers 2
//   --heads 4 --dim 64 --block 64 --batch 32 --vocab 34`) 198.6k -> 206.3k tokens/s on one thread (four
//   rounds; 196.2k with the long weight gradients on libxsmm too) and 352.9k -> 377.6k on two (three), the
//   toy 216.8k -> 235.1k (five), the GPT 35.0k -> 35.6k (six; the products up to 2^26 against those up to
//   2^25, which alone were even with main) and 60.0k -> 61.6k on two (four). On the Zen 4 the Zen 5's
//   bounds measured slower or even (the default experiment's shape 94.9k -> 88.4k tokens/s with the
//   1024-row bound, the GPT even with 2^26; docs/benchmarks.md, "On an AMD Zen 4 again").
// - On an Intel CPU with AVX-512, the same products up to 2^26 multiply-adds but only those at most 128
//   columns wide, and the weight gradients up to 2^25, at most 192 x 128, summed over at most 2048 rows.
//   On the Intel Xeon of 2026-12-06 (`bench_gemm --benchmark_filter='/t1/(openblas|xsmm_jit|dnnl_sgemm)/'
//   --benchmark_min_time=0.2`, GFLOP/s) libxsmm led oneDNN on those (the GPT's 768x128x512 A B 176 against
//   162, A B^T 162 against 154; the default experiment's 2048x64x256 A B 178 against 150, 192x64x2048 A^T B
//   160 against 138) and fell behind on wider ones, which it does not pack (2048x256x64 A B^T 142 against
//   166, 128x512x768 A^T B 102 against 155; A^T B 512 x 128 and 256 x 64 too). Whole steps, the two rules
//   alternated step by step in one process (`bench gpt`, median step): the toy shape 2.3% shorter on one
//   thread and 1.2% on two, the default experiment's 2.4% and 1.2%, the GPT 2.1% and 0.8%. libxsmm writes
//   the same code for every Intel AVX-512 level it knows (SKX, CLX, CPX: byte for byte on these shapes).
//   On the Intel Xeon of 2026-11-27 the whole step's products on libxsmm had been at best even with
//   OpenBLAS (below); the width bounds are what that did not try.
// - A B^T at every size, and every product above 64^3 (but those above): oneDNN's sgemm,
//   faster than OpenBLAS's on the products of the steps attnlab trains (experiments/bench/bench_gemm.cpp:
//   1.18-1.35x on the toy step's products, 1.08-1.18x on the GPT's, one thread, AVX-512, where libxsmm's JIT
//   kernels and BLIS were at best even with OpenBLAS; whole steps, 2026-11-27: toy 65.7k -> 76.0k tokens/s,
//   GPT 13.3k -> 15.2k). It costs about 9 MB of resident memory: its code (5 MB) and the packing buffers it
//   allocates. On a Zen 4 its step-sized A B^T (step_sized_product) run as A B on a copy of B^T
//   (onednn_bt_copy): there oneDNN's A B^T kernels ran at 94-101 GFLOP/s where its A B ran at 110-112, and
//   the GPT's forward products, copy included (2026-12-07, `bench gpt --threads 1 --steps 100
//   --products`, three alternated rounds, us a call), 768x128x512 1035-1066 -> 938-949, 768x384x128 750-768
//   -> 716-720, 768x512x128 999-1023 -> 985-993: the step's products 34.7-35.3 -> 34.1-34.4 ms, its fastest
//   step 40.4-41.1 -> 39.4-40.1. On two threads (each thread's half under 2^25, on libxsmm) it was even.
// - OpenBLAS: where oneDNN runs its AVX2 kernels (a CPU without AVX-512), the weight gradients A^T B of at
//   least 128 x 128 from at least 512 rows; and small A^T B^T, small products with another beta, and any call
//   the others refuse. On the AVX2 Zen 3, 2026-12-02 (`bench_gemm
//   --benchmark_filter='(gpt|toy)/.*/t1/(openblas|dnnl_sgemm)'`, six runs, GFLOP/s), the GPT's weight
//   gradients: 512x128x768 55-68 against oneDNN's 42-48, 384x128x768 64-76 against 58-62, 128x512x768 66-76
//   against 58-65, 128x128x768 even; the head's 65x128x768 and the toy step's (n = 64, k = 2048) stay faster
//   on oneDNN.
// A step's products were those with every side at least 32 until 2026-12-07; the sides from 16 that a
// small vocabulary's head brings went to oneDNN, which ran them at half libxsmm's speed in the toy step
// (`bench gpt --threads 1 --products`, toy shape, vocabulary 16, AMD Zen 4, us a call): the logits' 512 x
// 16 x 64 A B^T 35.9 against 12.4, their weight gradient 16 x 64 x 512 A^T B 21.1 against 10.4, the input
// gradient 512 x 64 x 16 A B 18.9 against 12.6; the step 0.7-1.1% shorter by its median (two runs, the
// two rules alternated step by step in one process). Warm and alone (a Google Benchmark loop of
// gemm_with, GFLOP/s) libxsmm led there too (112 against 77, 115 against 99, 101 against 91), and on a
// 20-symbol head over 2048 rows (A^T B 111 against 96, A B 104 against 91; A B^T 68 against 65), but
// lost a few rows' A B^T to its copy of B^T (16 x 512 x 128 55 against 87, 24 x 384 x 128 83 against
// 92): hence 32 rows, 16 for the other sides.
bool step_sized_product(bool ta, std::size_t m, std::size_t n, std::size_t k) {
  const std::size_t rows = ta ? k : m, side = ta ? std::min(m, n) : std::min(n, k);
  return m * n * k > kSmallProduct && rows >= 32 && side >= 16;
}

FloatProducts sgemm_route(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float beta) {
  const std::size_t size = m * n * k;
  const bool libxsmm_beta = libxsmm_takes_beta(beta);
  if (ta && !tb && !has_avx512() && m >= 128 && n >= 128 && k >= 512) return FloatProducts::openblas;
  static const LibxsmmStepProducts step = libxsmm_step_products();
  const bool step_sized = step_sized_product(ta, m, n, k);
  if (step_sized && !(ta && tb) && libxsmm_beta &&
      (ta ? size <= step.largest_weight_gradient && k <= step.longest_weight_gradient && m <= step.tallest_weight_gradient &&
                n <= step.widest_weight_gradient
          : size <= step.largest && n <= step.widest))
    return FloatProducts::libxsmm;
  if (step_sized && tb && !ta && onednn_takes_bt_copies()) return FloatProducts::onednn_bt_copy;
  if ((tb && !ta) || size > kSmallProduct) return FloatProducts::onednn;
  if (!openblas_has_small_kernels() && !tb && libxsmm_beta) return FloatProducts::libxsmm;
  return FloatProducts::openblas;
}

std::string sgemm_library() {
  const dnnl_version_t* v = dnnl_version();
  const std::string libxsmm = std::string(detail::library_name(FloatProducts::libxsmm)) + " " + LIBXSMM_VERSION;
  const LibxsmmStepProducts step = libxsmm_step_products();
  const auto power = [](std::size_t x) { return "2^" + std::to_string(__builtin_ctzll(x)); };  // the rule's sizes are powers of 2
  constexpr std::size_t any = LibxsmmStepProducts::kAny;
  const auto side = [](std::size_t x) { return x < any ? std::to_string(x) : std::string("any"); };
  std::string steps, weight_gradients;
  const auto add = [&](const std::string& bound) { weight_gradients += (weight_gradients.empty() ? "" : ", ") + bound; };
  if (step.largest_weight_gradient < step.largest) add("to " + power(step.largest_weight_gradient));
  if (step.tallest_weight_gradient < any || step.widest_weight_gradient < any)
    add("up to " + side(step.tallest_weight_gradient) + " x " + side(step.widest_weight_gradient));
  if (step.longest_weight_gradient < any) add("summed over up to " + std::to_string(step.longest_weight_gradient) + " rows");
  if (step.largest > 0)
    steps = libxsmm + " for products of 64^3 to " + power(step.largest) + " multiply-adds" +
            (step.widest < any ? " up to " + std::to_string(step.widest) + " columns" : std::string()) +
            (weight_gradients.empty() ? std::string() : " (weight gradients " + weight_gradients + ")") + ", ";
  return std::string(detail::library_name(FloatProducts::onednn)) + " " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         (onednn_takes_bt_copies() ? " (A B^T on a copy of B^T)" : "") + ", " + steps +
         (openblas_has_small_kernels() ? std::string(detail::library_name(FloatProducts::openblas)) : libxsmm) + " for small products";
}

namespace {

// B [n, k] (leading dimension ldb) transposed into this thread's buffer: B^T [k, n], its rows bt_copy_ld(n)
// apart, each on a 64-byte boundary (the kernels load them as whole vectors, and rows where the heap or an
// odd n put them made most loads cross a cache line: in the GPT step, 2026-12-07, Intel Xeon, libxsmm's
// 768x128x512 A B^T 625 -> 588 us, 768x128x128 161 -> 150; the same bits). Valid until the thread's next
// copy.
const float* copy_of_bt(const float* b, std::size_t n, std::size_t k, std::size_t ldb) {
  thread_local simd::AlignedVector<float> copy;
  copy.resize(k * bt_copy_ld(n));
  simd::transpose(b, n, k, ldb, copy.data(), bt_copy_ld(n));
  return copy.data();
}

}  // namespace

void gemm_with(FloatProducts library, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc, float beta) {
  if (empty_product(m, n, k, c, ldc, beta)) return;
  detail::ProductClock clock(ta, tb, m, n, k);
  if (library == FloatProducts::libxsmm && libxsmm_takes_beta(beta)) {
    if (!tb) {
      if (const SmallKernel kernel = small_kernel(ta, m, n, k, lda, ldb, ldc, beta != 0.0f)) {
        kernel(b, a, c);  // column-major: B first (small_kernel)
        clock.ran_on(detail::library_name(FloatProducts::libxsmm));
        return;
      }
    } else if (const SmallKernel kernel = small_kernel(ta, m, n, k, lda, bt_copy_ld(n), ldc, beta != 0.0f)) {
      kernel(copy_of_bt(b, n, k, ldb), a, c);  // small_kernel has no B^T
      clock.ran_on(detail::library_name(FloatProducts::libxsmm));
      return;
    }
  }
  const auto dim = [](std::size_t x) { return static_cast<dnnl_dim_t>(x); };
  if (library == FloatProducts::onednn || library == FloatProducts::onednn_bt_copy) {
    one_openmp_thread();
    const bool copy = library == FloatProducts::onednn_bt_copy && tb;
    const float* b_used = copy ? copy_of_bt(b, n, k, ldb) : b;
    const std::size_t ldb_used = copy ? bt_copy_ld(n) : ldb;
    if (dnnl_sgemm(ta ? 'T' : 'N', tb && !copy ? 'T' : 'N', dim(m), dim(n), dim(k), 1.0f, a, dim(lda), b_used, dim(ldb_used), beta, c,
                   dim(ldc)) == dnnl_success) {
      clock.ran_on(detail::library_name(FloatProducts::onednn));
      return;
    }
  }
  beta = zero_then_accumulate(m, n, c, ldc, beta, openblas_small_kernel(ta, tb, m, n, k));
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
          const float* b, std::size_t ldb, float* c, std::size_t ldc, float beta) {
  gemm_with(sgemm_route(ta, tb, m, n, k, beta), ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
          const double* b, std::size_t ldb, double* c, std::size_t ldc, double beta) {
  if (empty_product(m, n, k, c, ldc, beta)) return;
  detail::ProductClock clock(ta, tb, m, n, k);
  clock.ran_on("OpenBLAS float64");
  beta = zero_then_accumulate(m, n, c, ldc, beta);
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void unit_lower_solve(bool transpose, std::size_t m, std::size_t n, const float* l, std::size_t ldl, float* b, std::size_t ldb) {
  if (m == 0 || n == 0) return;
  cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, transpose ? CblasTrans : CblasNoTrans, CblasUnit, static_cast<int>(m),
              static_cast<int>(n), 1.0f, l, static_cast<int>(ldl), b, static_cast<int>(ldb));
}

void unit_lower_solve(bool transpose, std::size_t m, std::size_t n, const double* l, std::size_t ldl, double* b, std::size_t ldb) {
  if (m == 0 || n == 0) return;
  cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, transpose ? CblasTrans : CblasNoTrans, CblasUnit, static_cast<int>(m),
              static_cast<int>(n), 1.0, l, static_cast<int>(ldl), b, static_cast<int>(ldb));
}

}  // namespace attnlab
