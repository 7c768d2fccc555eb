// Matrix products through cblas_sgemm / cblas_dgemm. Transposes are BLAS flags, never copies; batch axes
// broadcast; a batched operand times a plain matrix is folded into one large gemm (the common case of a
// linear layer on [B, T, C] activations), otherwise one gemm per batch element.
//
// Legend: a is [..., M, K] (stored [..., K, M] when transpose_a), b is [..., K, N] (stored [..., N, K]
// when transpose_b), the result is [..., M, N].
#include <algorithm>
#include <functional>
#include <stdexcept>

#include "framework/autograd/grad_mode.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/elementwise_common.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

// One product C [m, n] = op(A) op(B) + beta C of contiguous operands. With `row_init` ([n], a Linear
// layer's bias; beta is then 0), C = op(A) op(B) + row_init in every row: each block's product is
// written first and the row added to its rows right after, while they are in cache. (Copying the row
// into C and asking for C + op(A) op(B) made the product read C: in a one-thread GPT step, alternated
// step by step in one process, 2026-11-28, the copies and that read cost 1.1 ms a step against 0.5 for
// the adds. The sum is the same, x W^T rounded and then b added, except where the library splits a long
// inner dimension and added b to the first part: the GPT's fc2, k = 512, moved in the last bit.)
template <class T>
struct Product {
  bool ta, tb;
  std::size_t m, n, k;
  const T* a;
  const T* b;
  T* c;
  T beta = T(0);
  const T* row_init = nullptr;

  // A product is split along its longer side, rows of C or (when n > m) columns, into blocks of at
  // least `grain` (8, or enough for 2^21 FLOPs).
  std::size_t side() const { return m >= n ? m : n; }
  std::size_t grain() const {
    constexpr std::size_t kMinFlopsPerThread = 1 << 21;
    return std::max<std::size_t>(8, kMinFlopsPerThread / std::max<std::size_t>(2 * (m >= n ? n : m) * k, 1));
  }
  // The blocks it is split into on `threads` threads, as parallel_for splits side() by grain().
  std::size_t parts(std::size_t threads) const {
    return threads < 2 || side() < 2 * grain() ? 1 : std::min(threads, side() / grain());
  }
  // The last rows of a weight gradient that products_side_by_side gives the input gradient's thread
  // (see there): m / 8 in whole 16s when they hold at least 2^21 multiply-adds and m >= n (so that they
  // are the end of side()), else 0.
  std::size_t moved_rows() const {
    const std::size_t rows = m >= n ? m / 8 / 16 * 16 : 0;
    return rows * n * k >= (std::size_t{1} << 21) ? rows : 0;
  }
  // Rows (or columns) [begin, end) of C.
  void block(std::size_t begin, std::size_t end) const {
    const std::size_t lda = ta ? m : k, ldb = tb ? k : n;
    if (m >= n) {
      gemm(ta, tb, end - begin, n, k, ta ? a + begin : a + begin * k, lda, b, ldb, c + begin * n, n, beta);
      if (row_init) add_row(row_init, end - begin, n, c + begin * n, n);
    } else {
      gemm(ta, tb, m, end - begin, k, a, lda, tb ? b + begin * k : b + begin, ldb, c + begin, n, beta);
      if (row_init) add_row(row_init + begin, m, end - begin, c + begin, n);
    }
  }

  // rows [count, cols] (ld apart) += row [cols], to each.
  static void add_row(const T* row, std::size_t count, std::size_t cols, T* rows, std::size_t ld) {
    for (std::size_t r = 0; r < count; ++r) {
      T* out = rows + r * ld;
#pragma omp simd
      for (std::size_t j = 0; j < cols; ++j) out[j] += row[j];
    }
  }
};

// A product split into blocks across attnlab's threads when it is large enough to pay for it. OpenBLAS
// itself runs on one thread (see parallel.hpp), so this is the only pool.
template <class T>
void product(const Product<T>& p) {
  parallel_for(p.side(), p.grain(), [&](std::size_t begin, std::size_t end) { p.block(begin, end); });
}

template <class T>
void product(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T* c, T beta = T(0),
             const T* row_init = nullptr) {
  product(Product<T>{ta, tb, m, n, k, a, b, c, beta, row_init});
}

// A Linear's two gradients, dx = g W and dW = g^T x (equal FLOPs), in one parallel region, each on its
// own half of the threads: on two threads each runs whole on one of them, side by side, where one after
// the other each would be split in two. Split, these thin products cost far more cycles than whole: in
// the toy step at two threads (`bench gpt --dim 64 --block 16 --batch 32`, cycles inside gemm counted
// per shape, 2026-11-28) the weight gradients' halves ([96 x 64] over 512 rows, each packing the whole
// shared operand again) took 26-69% more than the whole products on one thread, the input gradients'
// 6-20%; side by side and whole, 8-35% more (what is left is mostly each core reading what the other
// wrote).
//
// Side by side, the weight gradient (A^T B of two activations the forward wrote long before) is the
// slower: in the reference GPT's step on two threads (2026-12-07) fc1's took 738-761 us against its
// input gradient's 587-618, qkv's 557-582 against 436-459, whichever thread ran it, and the input
// gradient's thread then waited ~1.55 ms a step. So when each product runs whole, that thread also takes
// the weight gradient's last rows: an eighth of them in whole 16s (the GPT's step 2.6-2.8% shorter on
// two threads, in-process alternation; a tenth 1.8-2.2%, a sixteenth ~1%, three sixteenths 0.3-1.3%;
// docs/benchmarks.md, "Intel Xeon, 2026-12-07 from 04:21 UTC"), when they hold at least 2^21
// multiply-adds (a smaller product's extra call costs what it saves: the toy step was up to 2.7% slower
// with its 16 rows moved) and the weight gradient has at least as many rows as columns (its columns moved
// instead re-read the longer operand: fc2's measured no better). Every block is fixed by the shapes and
// the thread count, so which thread runs which chunk, or the caller running both (sharing off), does not
// change a bit.
//
// With `bias` (non-null, [n] of the input gradient's k, zeroed), the bias gradient, the column sums of the
// output gradient g (input_grad's A [rows, out]), is summed too, and `then` (when set: the work that
// reads the input gradient next, a LayerNorm's backward or a GELU's slope) runs after it: on two threads
// both by the input gradient's thread after its product, in the same region, instead of in regions of
// their own after it; else after both products, their own regions split across the threads. In the toy
// step on two threads, those regions each waited for the second core (7.5 us of 17 for the bias sums)
// while the input gradient's thread had waited 14 us a region for the weight gradient's. Each column is
// summed in row order, and `then` splits its work by its own fixed blocks, either way: the same bits.
// With `then`, that thread takes none of the weight gradient's rows: it has enough to do (the GPT's step
// on two threads 2.5-3% shorter than with an eighth moved, half of an eighth in between; four rounds
// alternated in one build; the toy's products move none either way). A large `then` (an input gradient
// of at least 4 kElementsPerChunk elements) runs after the region instead, with the bias sum, in regions
// of their own split across the threads: the GPT's GELU slope and fc1's bias sum over [768, 512] took 151
// us on the input gradient's thread after its 1099 us product while the other thread's weight gradient
// had taken 1037 (AMD Zen 4, 2026-12-07, four layers a step). Alternated step by step in one process
// (`bench gpt --threads 2`, median step, AMD Zen 4, 2026-12-07): the GPT's step 0.6-0.8% shorter (two
// runs; 0.2-1.1% with the bound at 8 chunks, which leaves its LayerNorms' [768, 128] inside), the toy's
// ([512, 256] after its fc2) 0.7-1.1%.
template <class T>
void products_side_by_side(const Product<T>& input_grad, const Product<T>& weight_grad, T* bias, const std::function<void()>& then) {
  const std::size_t threads = static_cast<std::size_t>(num_threads());
  const std::size_t rows = input_grad.m, out = input_grad.k;  // g [rows, out]
  T* g = const_cast<T*>(input_grad.a);                        // only read: sum_rows scales g only when given a scale
  const auto after = [&] {
    if (bias) detail::sum_rows_parallel(g, static_cast<const T*>(nullptr), rows, out, bias);
    if (then) then();
  };
  if (threads < 2) {
    product(input_grad), product(weight_grad);
    after();
    return;
  }
  const std::size_t parts1 = input_grad.parts(threads / 2), parts2 = weight_grad.parts(threads - threads / 2);
  if (parts1 == 1 && parts2 == 1) {
    const std::size_t moved = then ? 0 : weight_grad.moved_rows();
    const bool after_region = then && input_grad.m * input_grad.n >= 4 * kElementsPerChunk;
    parallel_for(2, 1, [&](std::size_t c0, std::size_t c1) {
      for (std::size_t c = c0; c < c1; ++c) {
        if (c == 0) {
          input_grad.block(0, input_grad.side());
          if (moved) weight_grad.block(weight_grad.side() - moved, weight_grad.side());
          if (!after_region) after();  // its regions (the bias sum's too) run serially here, on this thread
        } else {
          weight_grad.block(0, weight_grad.side() - moved);
        }
      }
    });
    if (after_region) after();
    return;
  }
  parallel_for(parts1 + parts2, 1, [&](std::size_t c0, std::size_t c1) {
    for (std::size_t c = c0; c < c1; ++c) {
      if (c < parts1)
        input_grad.block(input_grad.side() * c / parts1, input_grad.side() * (c + 1) / parts1);
      else
        weight_grad.block(weight_grad.side() * (c - parts1) / parts2, weight_grad.side() * (c - parts1 + 1) / parts2);
    }
  });
  after();
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
             const LinearGrads grads = linear_grads(g, x, w, rx, rw, rb);
             return std::vector<Tensor>{grads.x, grads.weight, grads.bias};
           });
  }
  return out;
}

LinearGrads linear_grads(const Tensor& g, const Tensor& x, const Tensor& weight, bool want_x, bool want_weight, bool want_bias,
                         const std::function<void(Tensor&)>& then_x) {
  if (weight.dim() != 2 || g.dim() < 1) throw std::invalid_argument("linear_grads: expected a weight [out, in] and g [..., out]");
  const std::size_t out_features = weight.size(0), in = weight.size(1);
  const std::size_t rows = shape_numel(Shape(g.shape().begin(), g.shape().end() - 1));
  if (g.dtype() != weight.dtype() || g.size(-1) != out_features || (want_weight && (x.dtype() != g.dtype() || x.numel() != rows * in))) {
    throw std::invalid_argument("linear_grads: expected g [..., " + std::to_string(out_features) + "] and x [..., " + std::to_string(in) +
                                "] with its rows, of the weight's dtype, got " + shape_str(g.shape()) + " and " + shape_str(x.shape()));
  }
  LinearGrads grads;
  Shape x_shape = g.shape();
  x_shape.back() = in;
  const bool nothing = rows * in * out_features == 0;  // no elements, or sums of nothing: zeros
  if (want_x) grads.x = nothing ? zeros(x_shape, g.dtype()) : empty(x_shape, g.dtype());
  if (want_weight) grads.weight = nothing ? zeros({out_features, in}, g.dtype()) : empty({out_features, in}, g.dtype());
  if (want_bias) grads.bias = zeros({out_features}, g.dtype());
  if (nothing) {
    if (want_x && then_x) then_x(grads.x);
    return grads;
  }
  dispatch_floating(g.dtype(), "linear backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = g.data<T>();
    const Product<T> dx{false, false, rows, in, out_features, pg, weight.data<T>(), want_x ? grads.x.data<T>() : nullptr};
    const Product<T> dw{true, false, out_features, in, rows, pg, want_weight ? x.data<T>() : nullptr,
                        want_weight ? grads.weight.data<T>() : nullptr};
    T* db = want_bias ? grads.bias.data<T>() : nullptr;
    if (want_x && want_weight) {
      // then_x may run on a worker: with the caller's grad mode, which is per thread
      const bool recording = grad_enabled();
      const std::function<void()> then = [&] {
        if (recording) return then_x(grads.x);
        NoGradGuard no_grad;
        then_x(grads.x);
      };
      products_side_by_side(dx, dw, db, then_x ? then : std::function<void()>());
      return;
    }
    if (want_x) product(dx);
    if (want_weight) product(dw);
    if (db) detail::sum_rows_parallel(const_cast<T*>(pg), static_cast<const T*>(nullptr), rows, out_features, db);  // g only read
    if (want_x && then_x) then_x(grads.x);
  });
  return grads;
}

}  // namespace attnlab
