// BLIS through its native typed API (bli_sgemm, general strides; small and skinny products take its sup
// path when the kernel set has one). BLIS exports cblas_* and sgemm_ as OpenBLAS does, so it is opened
// here with dlopen (local, deep binding) rather than linked: neither library's BLAS symbols can then
// replace the other's. Its kernel set is picked at load time from the CPU, or from BLIS_ARCH_TYPE (an
// arch_t number: 0 skx, 3 haswell, 6 zen3). One BLIS thread per call.
#include <blis.h>
#include <dlfcn.h>

#include <stdexcept>

#include "experiments/bench/gemm/library.hpp"

namespace attnlab::gemm_bench {
namespace {

struct BlisApi {
  decltype(&bli_sgemm) sgemm = nullptr;
  decltype(&bli_thread_set_num_threads) set_threads = nullptr;
  decltype(&bli_arch_query_id) arch_id = nullptr;
  decltype(&bli_arch_string) arch_string = nullptr;
  decltype(&bli_info_get_version_str) version = nullptr;
};

const BlisApi& blis_api() {
  static const BlisApi api = [] {
    void* handle = dlopen(ATTNLAB_BLIS_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) throw std::runtime_error(std::string("cannot open BLIS: ") + dlerror());
    BlisApi a;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (!fn) throw std::runtime_error(std::string("BLIS has no ") + name);
    };
    get(a.sgemm, "bli_sgemm");
    get(a.set_threads, "bli_thread_set_num_threads");
    get(a.arch_id, "bli_arch_query_id");
    get(a.arch_string, "bli_arch_string");
    get(a.version, "bli_info_get_version_str");
    a.set_threads(1);
    return a;
  }();
  return api;
}

}  // namespace

std::vector<Library> blis_libraries() {
  const BlisApi& api = blis_api();
  Library blis{"blis", std::string("BLIS ") + api.version() + ", kernels " + api.arch_string(api.arch_id()), nullptr};
  blis.prepare = [&api](const Block& s) -> Kernel {
    // Row-major: row stride = leading dimension, column stride 1; a transpose is a flag.
    return [&api, s](const float* a, const float* b, float* c) {
      float one = 1.0f, zero = 0.0f;
      api.sgemm(s.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.m, s.n, s.k, &one,
                const_cast<float*>(a), s.lda, 1, const_cast<float*>(b), s.ldb, 1, &zero, c, s.ldc, 1);
    };
  };
  return {blis};
}

}  // namespace attnlab::gemm_bench
