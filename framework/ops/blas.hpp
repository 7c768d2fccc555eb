// The BLAS runtime: which OpenBLAS kernel set is in use, how many threads it runs, and the fix for CPUs
// that OpenBLAS does not recognise.
//
// OpenBLAS 0.3.21 (Debian bookworm) picks its kernels from the CPU model when the library loads. On
// virtual CPUs that report a generic model name it falls back to "Prescott" (SSE3) kernels, about 4.5x
// slower for sgemm than the AVX-512 ones the CPU supports (measured: 32 against 143 GFLOP/s for
// 768x128x512 on one thread). OPENBLAS_CORETYPE overrides the choice, but only in the environment the
// process starts with; programs call reexec_with_blas_core() first thing in main() to fix that.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace attnlab {

// The kernel set OpenBLAS chose ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();
// The CPU's vendor as cpuid reports it ("GenuineIntel", "AuthenticAMD"; "unknown" where there is no cpuid).
// oneDNN picks its kernels by what the CPU reports, so with blas_core_name() it is what decides a run's
// bits besides the build: runs repeat bit for bit on machines that agree on both.
std::string cpu_vendor();
// The compiler that built attnlab ("GCC 12.2.0", "clang 14.0.6"): the part of the build that decides bits.
// GCC fuses a * b + c into one FMA across statements, clang only within an expression: a clang build's
// default experiment moves by an ulp from its second step; with -ffp-contract=fast its 60 losses of the
// golden run are GCC's to the bit, but the weights after them still differ in their last bits.
std::string compiler_name();
// The core OpenBLAS should use on this CPU when it chose a slower generic one; empty when its choice is
// fine or OPENBLAS_CORETYPE is already set.
std::string better_blas_core();
// If better_blas_core() names a core, or OpenBLAS was left to pick its own thread count
// (OPENBLAS_NUM_THREADS unset), sets OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS=1 and
// re-executes this program with the same arguments (does not return on success). Returns normally when
// nothing needs changing or exec fails.
void reexec_with_blas_core(char** argv);
// Number of threads OpenBLAS uses for one call.
void set_blas_threads(int threads);
int blas_threads();

// Whether OpenBLAS's kernel set has small-matrix kernels (SkylakeX's, and Cooperlake's and SapphireRapids's,
// which are SkylakeX's for sgemm; the others pack both operands of every product).
bool openblas_has_small_kernels();
// Whether a float product op(A) [m, k] op(B) [k, n] is of a training step's size: above 64^3 multiply-adds,
// at least 32 rows of activations (m; for A^T B, a weight gradient, the k rows it sums over) and at least
// 16 on its other two sides (a small vocabulary's head: the toy's 512 x 16 x 64 logits and their 16 x 64
// weight gradient). Not a generated token's 1 x n x k, nor a few rows' A B^T, which the copy of B^T that
// libxsmm needs costs more than it saves (blas.cpp has the measurements). The products
// libxsmm_step_products() and onednn_takes_bt_copies() speak of.
bool step_sized_product(bool ta, std::size_t m, std::size_t n, std::size_t k);
// Which float products of a training step's sizes go to libxsmm's JIT kernels (of the step-sized ones,
// not A^T B^T, beta 0 or 1): those of at most `largest`
// multiply-adds and at most `widest` columns (n), and of the weight gradients (A^T B) those of at most
// `largest_weight_gradient` that sum over at most `longest_weight_gradient` rows (k) into at most
// `tallest_weight_gradient` x `widest_weight_gradient` (m x n). None (all zero) but on an AMD Zen 4 or
// Zen 5 and an Intel CPU with AVX-512, the CPUs where libxsmm was measured faster than oneDNN on them
// (blas.cpp has the figures).
struct LibxsmmStepProducts {
  static constexpr std::size_t kAny = static_cast<std::size_t>(-1);
  std::size_t largest = 0, largest_weight_gradient = 0, longest_weight_gradient = 0;
  std::size_t widest = kAny, tallest_weight_gradient = kAny, widest_weight_gradient = kAny;
};
LibxsmmStepProducts libxsmm_step_products();
bool libxsmm_takes_step_products();  // libxsmm_step_products().largest > 0
// The distance between the rows of the copy of B^T [k, n] that an A B^T through libxsmm (its JIT kernels
// take no transposed B) or FloatProducts::onednn_bt_copy is computed from: n rounded up to 16 floats, so
// that every row of the 64-byte aligned copy starts a cache line (blas.cpp has the measurement).
std::size_t bt_copy_ld(std::size_t n);
// Whether oneDNN's step-sized A B^T (step_sized_product) run as A B on a copy of B^T
// (FloatProducts::onednn_bt_copy): on an AMD Zen 4, where oneDNN's A B^T kernels were measured slower than
// its A B (blas.cpp).
bool onednn_takes_bt_copies();

// The library a float product op(A) [m, k] op(B) [k, n] (+ beta C) goes to, and how: blas.cpp says why.
// onednn_bt_copy is oneDNN's sgemm on a copy of B^T (op(A) B^T computed as op(A) B; a product without B^T as
// onednn). A product routed to libxsmm for which it compiles no kernel, or to oneDNN which refuses it, goes
// to OpenBLAS.
enum class FloatProducts { libxsmm, onednn, onednn_bt_copy, openblas };
FloatProducts sgemm_route(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float beta);

// The libraries that compute the float products ("oneDNN 2.6.3, libxsmm 1.17 for small products"):
// oneDNN's sgemm those of a training step (libxsmm those libxsmm_step_products() takes, on a Zen 4, a
// Zen 5 or an Intel CPU with AVX-512; "oneDNN 2.6.3 (A B^T on a copy of B^T)" where
// onednn_takes_bt_copies()), libxsmm the small chunk products of the recurrent kernels
// ("OpenBLAS for small products" where its kernel set has small-matrix kernels of its own); float64
// products stay on OpenBLAS.
std::string sgemm_library();

// Row-major C [m, n] (leading dimension ldc) = op(A) op(B) + beta C, with explicit leading dimensions so
// that a block of a larger product can be computed in place: float through the library sgemm_route names,
// on the calling thread, double through OpenBLAS's cblas_dgemm (gradchecks). With beta 0, C is written
// without being read.
void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
          const float* b, std::size_t ldb, float* c, std::size_t ldc, float beta = 0.0f);
void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
          const double* b, std::size_t ldb, double* c, std::size_t ldc, double beta = 0.0);
// The float gemm() through the given library instead of the one sgemm_route() names, so that tests can
// check every library on every machine. libxsmm takes beta 0 or 1 only; a product a library does not
// take goes to OpenBLAS, as in gemm().
void gemm_with(FloatProducts library, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a,
               std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc, float beta = 0.0f);

// The time spent inside gemm() and the FLOPs it did (2 m n k a call), summed over the threads that
// called it, while counting is on: `attnlab bench gpt` reports how fast a step's products run against the
// machine's sgemm rate and what share of the step they take. Off by default, when a product pays one
// relaxed atomic load for it.
struct ProductTotals {
  double seconds = 0.0;
  double flops = 0.0;
  std::size_t calls = 0;
};
// With `by_shape`, each form as well (`attnlab bench gpt --products`): op(A) [m, k] op(B) [k, n] and the
// library that ran it (a product a library refused is counted where it went), longest total first.
struct ProductShape {
  bool ta = false, tb = false;
  std::size_t m = 0, n = 0, k = 0;
  std::string library;  // "libxsmm", "oneDNN", "OpenBLAS"; float64 products "OpenBLAS float64"
  double seconds = 0.0;
  std::size_t calls = 0;
};
void count_products(bool on, bool by_shape = false);
ProductTotals product_totals();                     // since the last count_products(true, ...)
std::vector<ProductShape> product_totals_by_shape();  // since the last count_products(true, true); else empty

// Solves op(L) X = B in place: B [m, n] (row-major, leading dimension ldb) becomes X, for L [m, m] unit
// lower triangular (its diagonal and upper part are not read); op(L) = L^T when `transpose`. cblas_?trsm.
void unit_lower_solve(bool transpose, std::size_t m, std::size_t n, const float* l, std::size_t ldl, float* b, std::size_t ldb);
void unit_lower_solve(bool transpose, std::size_t m, std::size_t n, const double* l, std::size_t ldl, double* b, std::size_t ldb);

}  // namespace attnlab
