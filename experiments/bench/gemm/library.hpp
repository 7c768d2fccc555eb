// One float32 product as each library under test computes it (bench_gemm.cpp times them side by side).
//
// A block is a row-major product C [m, n] (leading dimension ldc) = op(A) op(B), overwriting C, the same
// contract as attnlab's gemm() with beta 0: A is [m, k] with leading dimension lda, or stored [k, m] when
// ta; B is [k, n] with leading dimension ldb, or stored [n, k] when tb. A library prepares a kernel per
// block shape once, outside the timing (JIT code, a primitive, nothing), and the kernel then runs on any
// operands of that shape; each kernel is called by one thread at a time.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace attnlab::gemm_bench {

struct Block {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
};

using Kernel = std::function<void(const float* a, const float* b, float* c)>;

struct Library {
  std::string name;
  std::string about;                              // version and kernel set, printed once
  std::function<Kernel(const Block&)> prepare;   // throws std::runtime_error when the library fails
  bool training = true;  // false when its time is not what a training step would pay (a bound, shown apart)
};

// One function per library file; each returns its variants.
std::vector<Library> openblas_libraries();
std::vector<Library> blis_libraries();
std::vector<Library> xsmm_libraries();
std::vector<Library> dnnl_libraries();

}  // namespace attnlab::gemm_bench
