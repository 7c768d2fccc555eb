// oneDNN 2.6, run on the calling thread (the benchmark sets OpenMP's thread count to one outside its own
// parallel region, and regions do not nest).
//   dnnl_sgemm         its row-major sgemm on every call (no state kept between calls).
//   dnnl_matmul        a matmul primitive created once per block shape, operands in place (strides).
//   dnnl_packed        the same with B in the layout the library chooses: B reordered into it on every
//                      call (what training pays: a weight changes every step and is used once in each form).
//   dnnl_packed_frozen B reordered on the first call only: the bound for weights that never change (an
//                      eval-only forward); not a training figure.
#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_version.h>

#include <memory>
#include <stdexcept>

#include "experiments/bench/gemm/library.hpp"

namespace attnlab::gemm_bench {
namespace {

using dnnl::memory;

dnnl::engine& cpu() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

memory::desc strided(memory::dim rows, memory::dim cols, memory::dim ld, bool transposed) {
  return memory::desc({rows, cols}, memory::data_type::f32, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

// The primitive and its memories for one block shape; handles are pointed at the operands on each call.
struct Matmul {
  dnnl::stream stream{cpu()};
  dnnl::matmul primitive;
  memory src, weights, dst, packed;
  dnnl::reorder pack;
  const float* packed_from = nullptr;
};

Kernel matmul_kernel(const Block& s, bool packed, bool frozen) {
  auto mm = std::make_shared<Matmul>();
  const memory::desc src_md = strided(s.m, s.k, s.lda, s.ta), user_b_md = strided(s.k, s.n, s.ldb, s.tb);
  const memory::desc dst_md = strided(s.m, s.n, s.ldc, false);
  const memory::desc b_md = packed ? memory::desc({s.k, s.n}, memory::data_type::f32, memory::format_tag::any) : user_b_md;
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, b_md, dst_md), cpu());
  mm->primitive = dnnl::matmul(pd);
  mm->src = memory(src_md, cpu(), DNNL_MEMORY_NONE);
  mm->weights = memory(user_b_md, cpu(), DNNL_MEMORY_NONE);
  mm->dst = memory(dst_md, cpu(), DNNL_MEMORY_NONE);
  if (packed) {
    mm->packed = memory(pd.weights_desc(), cpu());
    mm->pack = dnnl::reorder(mm->weights, mm->packed);
  }
  return [mm, packed, frozen](const float* a, const float* b, float* c) {
    mm->src.set_data_handle(const_cast<float*>(a));
    mm->dst.set_data_handle(c);
    if (packed && (!frozen || mm->packed_from != b)) {
      mm->weights.set_data_handle(const_cast<float*>(b));
      mm->pack.execute(mm->stream, mm->weights, mm->packed);
      mm->packed_from = b;
    } else if (!packed) {
      mm->weights.set_data_handle(const_cast<float*>(b));
    }
    mm->primitive.execute(mm->stream, {{DNNL_ARG_SRC, mm->src}, {DNNL_ARG_WEIGHTS, packed ? mm->packed : mm->weights},
                                       {DNNL_ARG_DST, mm->dst}});
    mm->stream.wait();
  };
}

Kernel sgemm_kernel(const Block& s) {
  return [s](const float* a, const float* b, float* c) {
    if (dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a, s.lda, b, s.ldb, 0.0f, c, s.ldc) != dnnl_success)
      throw std::runtime_error("dnnl_sgemm failed");
  };
}

}  // namespace

std::vector<Library> dnnl_libraries() {
  const dnnl_version_t* v = dnnl_version();
  const std::string about = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
                            ", cpu runtime " + (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
  return {Library{"dnnl_sgemm", about, sgemm_kernel},
          Library{"dnnl_matmul", about, [](const Block& s) { return matmul_kernel(s, false, false); }},
          Library{"dnnl_packed", about, [](const Block& s) { return matmul_kernel(s, true, false); }},
          Library{"dnnl_packed_frozen", about, [](const Block& s) { return matmul_kernel(s, true, true); }, false}};
}

}  // namespace attnlab::gemm_bench
