// Matrix products through cblas_sgemm / cblas_dgemm. Transposes are BLAS flags, never copies; batch axes
// broadcast; a batched operand times a plain matrix is folded into one large gemm (the common case of a
// linear layer on [B, T, C] activations), otherwise one gemm per batch element.
//
// Legend: a is [..., M, K] (stored [..., K, M] when transpose_a), b is [..., K, N] (stored [..., N, K]
// when transpose_b), the result is [..., M, N].
#include <algorithm>
#include <stdexcept>

#include "framework/ops/blas.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

// One product C [m, n] = op(A) op(B) + beta C of contiguous operands, split into blocks of rows (or
// columns, when n > m) across attnlab's threads when it is large enough to pay for it. OpenBLAS itself
// runs on one thread (see parallel.hpp), so this is the only pool. With `row_init` ([n]), every row of C
// starts as it instead (a Linear layer's bias), written by each block just before its product, while
// the block's rows are in cache and on every thread.
template <class T>
void product(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T* c, T beta = T(0),
             const T* row_init = nullptr) {
  const std::size_t lda = ta ? m : k, ldb = tb ? k : n;
  const T block_beta = row_init ? T(1) : beta;
  constexpr std::size_t kMinFlopsPerThread = 1 << 21;
  if (m >= n) {
    parallel_for(m, std::max<std::size_t>(8, kMinFlopsPerThread / std::max<std::size_t>(2 * n * k, 1)),
                 [&](std::size_t r0, std::size_t r1) {
                   if (row_init)
                     for (std::size_t r = r0; r < r1; ++r) std::copy(row_init, row_init + n, c + r * n);
                   gemm(ta, tb, r1 - r0, n, k, ta ? a + r0 : a + r0 * k, lda, b, ldb, c + r0 * n, n, block_beta);
                 });
  } else {
    parallel_for(n, std::max<std::size_t>(8, kMinFlopsPerThread / std::max<std::size_t>(2 * m * k, 1)),
                 [&](std::size_t c0, std::size_t c1) {
                   if (row_init)
                     for (std::size_t r = 0; r < m; ++r) std::copy(row_init + c0, row_init + c1, c + r * n + c0);
                   gemm(ta, tb, m, c1 - c0, k, a, lda, tb ? b + c0 * k : b + c0, ldb, c + c0, n, block_beta);
                 });
  }
}

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// sum_i op(A_i) op(B_i) over a batch of contiguous matrices into one [m, n] result: the gradient of an
// operand that was broadcast over the batch, without materialising one product per batch element.
Tensor batch_sum_product(const Tensor& a, const Tensor& b, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k) {
  const std::size_t count = a.numel() / (m * k);
  Tensor out = zeros({m, n}, a.dtype());
  dispatch_floating(a.dtype(), "matmul_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    for (std::size_t i = 0; i < count; ++i)
      gemm(ta, tb, m, n, k, pa + i * m * k, ta ? m : k, pb + i * k * n, tb ? k : n, pc, n, T(1));
  });
  return out;
}

// Element offsets of each batch matrix of an operand with batch shape `own`, for every index of the
// broadcast batch shape `full`.
std::vector<std::size_t> batch_offsets(const Shape& own, const Shape& full, std::size_t matrix_size) {
  const std::size_t rank = full.size();
  std::vector<std::size_t> stride(rank, 0);
  std::size_t s = matrix_size;
  for (std::size_t i = rank; i-- > 0;) {
    const std::size_t j = i + own.size();
    const std::size_t dim = j >= rank ? own[j - rank] : 1;
    stride[i] = dim == 1 ? 0 : s;
    s *= dim;
  }
  const std::size_t count = shape_numel(full);
  std::vector<std::size_t> offsets(count);
  std::vector<std::size_t> counter(rank, 0);
  std::size_t offset = 0;
  for (std::size_t b = 0; b < count; ++b) {
    offsets[b] = offset;
    for (std::size_t i = rank; i-- > 0;) {
      offset += stride[i];
      if (++counter[i] < full[i]) break;
      offset -= stride[i] * full[i];
      counter[i] = 0;
    }
  }
  return offsets;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  if (a.dim() < 2 || b.dim() < 2) {
    throw std::invalid_argument("matmul: both operands need rank >= 2, got shapes " + shape_str(a.shape()) + " and " +
                                shape_str(b.shape()));
  }
  if (a.dtype() != b.dtype()) {
    throw std::invalid_argument(std::string("matmul: operands have different dtypes (") + dtype_name(a.dtype()) +
                                " and " + dtype_name(b.dtype()) + ")");
  }
  const std::size_t m = transpose_a ? a.size(-1) : a.size(-2);
  const std::size_t k = transpose_a ? a.size(-2) : a.size(-1);
  const std::size_t kb = transpose_b ? b.size(-1) : b.size(-2);
  const std::size_t n = transpose_b ? b.size(-2) : b.size(-1);
  if (k != kb) {
    throw std::invalid_argument("matmul: inner dimensions differ: " + shape_str(a.shape()) +
                                (transpose_a ? "^T" : "") + " times " + shape_str(b.shape()) +
                                (transpose_b ? "^T" : "") + " (" + std::to_string(k) + " vs " + std::to_string(kb) + ")");
  }
  const Shape batch = broadcast_shapes(batch_of(a.shape()), batch_of(b.shape()), "matmul (batch axes)");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = empty(out_shape, a.dtype());
  const std::size_t b_batch = shape_numel(batch_of(b.shape()));
  const std::size_t a_batch = shape_numel(batch_of(a.shape()));

  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    if (m * n == 0) return;
    if (k == 0) {
      std::fill(pc, pc + out.numel(), T(0));
      return;
    }
    if (b_batch == 1 && !transpose_a && a_batch == shape_numel(batch)) {
      // [batch * M, K] x [K, N]: one gemm.
      product(false, transpose_b, a_batch * m, n, k, pa, pb, pc);
      return;
    }
    const auto a_off = batch_offsets(batch_of(a.shape()), batch, m * k);
    const auto b_off = batch_offsets(batch_of(b.shape()), batch, k * n);
    const std::size_t count = a_off.size();
    if (count >= static_cast<std::size_t>(num_threads())) {
      // Many small products (attention heads): one thread per block of the batch.
      parallel_for(count, std::max<std::size_t>(1, (1u << 18) / std::max<std::size_t>(2 * m * n * k, 1)),
                   [&](std::size_t i0, std::size_t i1) {
                     for (std::size_t i = i0; i < i1; ++i)
                       gemm(transpose_a, transpose_b, m, n, k, pa + a_off[i], transpose_a ? m : k, pb + b_off[i],
                            transpose_b ? k : n, pc + i * m * n, n);
                   });
    } else {
      for (std::size_t i = 0; i < count; ++i)
        product(transpose_a, transpose_b, m, n, k, pa + a_off[i], pb + b_off[i], pc + i * m * n);
    }
  });

  if (needs_grad({&a, &b})) {
    record(out, "matmul", {a, b},
           [a = a.detach(), b = b.detach(), ta = transpose_a, tb = transpose_b, ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) {
             Tensor ga, gb;
             if (ra) {
               // Batch counts from the shapes (not numel / matrix size, which divides by zero for empty matrices).
               const Shape b_batch(b.shape().begin(), b.shape().end() - 2), g_batch(g.shape().begin(), g.shape().end() - 2);
               if (a.dim() == 2 && b.dim() > 2 && shape_numel(b_batch) == shape_numel(g_batch)) {
                 // A plain matrix against a batch (Linformer's projection): accumulate over the batch.
                 ga = ta ? batch_sum_product(b, g, tb, true, a.size(0), a.size(1), g.size(-1))
                         : batch_sum_product(g, b, false, !tb, a.size(0), a.size(1), g.size(-1));
               } else {
                 // dA = dC op(B)^T, or its transpose when A is stored transposed.
                 ga = ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb);
                 ga = sum_to(ga, a.shape());
               }
             }
             if (rb) {
               const bool fold = b.dim() == 2 && a.dim() > 2 && !ta;
               if (fold) {
                 // Batched A against a plain matrix: flatten the batch into the rows, one gemm.
                 const auto rows = static_cast<std::int64_t>(shape_numel(Shape(a.shape().begin(), a.shape().end() - 1)));
                 const Tensor a2 = reshape(a, {rows, static_cast<std::int64_t>(a.size(-1))});
                 const Tensor g2 = reshape(g, {rows, static_cast<std::int64_t>(g.size(-1))});
                 gb = tb ? matmul(g2, a2, true, false) : matmul(a2, g2, true, false);
               } else {
                 gb = tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false);
                 gb = sum_to(gb, b.shape());
               }
             }
             return std::vector<Tensor>{ga, gb};
           });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (x.dim() < 2 || weight.dim() != 2 || x.size(-1) != weight.size(1) || x.dtype() != weight.dtype()) {
    throw std::invalid_argument("linear: expected x [..., in] and weight [out, in] of one dtype, got " + shape_str(x.shape()) + " and " +
                                shape_str(weight.shape()));
  }
  const std::size_t in = weight.size(1), out_features = weight.size(0), rows = x.numel() / std::max<std::size_t>(in, 1);
  if (bias.defined() && (bias.shape() != Shape{out_features} || bias.dtype() != x.dtype())) {
    throw std::invalid_argument("linear: bias must be [" + std::to_string(out_features) + "], got " + shape_str(bias.shape()));
  }
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = empty(out_shape, x.dtype());
  dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pc = out.data<T>();
    product(false, true, rows, out_features, in, x.data<T>(), weight.data<T>(), pc, T(0), bias.defined() ? bias.data<T>() : nullptr);
  });
  if (needs_grad({&x, &weight, &bias})) {
    record(out, "linear", {x, weight, bias},
           [x = x.detach(), w = weight.detach(), rx = x.requires_grad(), rw = weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             const auto n = static_cast<std::int64_t>(g.size(-1)), k = static_cast<std::int64_t>(x.size(-1));
             const std::int64_t r = static_cast<std::int64_t>(x.numel()) / std::max<std::int64_t>(k, 1);
             Tensor gx, gw, gb;
             if (rx) gx = matmul(g, w);                                                    // [..., in]
             if (rw) gw = matmul(reshape(g, {r, n}), reshape(x, {r, k}), true, false);  // [out, in]
             if (rb) gb = sum_to(g, {g.size(-1)});                                         // [out]
             return std::vector<Tensor>{gx, gw, gb};
           });
  }
  return out;
}

}  // namespace attnlab
