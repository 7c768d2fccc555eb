// One head of softmax attention in register tiles (FlashAttention-2 on a CPU core), its forward.
//
// Per block of Br query rows and chunk of Bc keys (K^T packed once per head in chunks [D, Bc], so a
// tile's B rows are contiguous; Q scaled once): for each tile of up to 8 rows (6 with AVX2), the scores
// against the chunk's keys those rows may see (tiles of those rows by 2 vectors: Q values broadcast, K^T
// rows loaded; ALiBi bias and masks applied in registers) with each row's max over them, then per row an
// online-softmax update of its running max and sum (the accumulated output rescaled when the max grows)
// and the exp in one streaming pass over the row's logits, and O += P V over the keys the rows see. The
// block's output and per-row log-sum-exp L are written once at the end. A head whose keys fit one chunk
// takes rows_forward instead (query rows in the vector lanes; rows_in_lanes says when, and why there).
//
// Legend: Tq/Tk tokens, D head dim, Dv value dim, Dp/Dvp the dims rounded up to whole vectors, W lanes,
// Br query rows per block, Bc keys per chunk, R rows of this block, C keys of this chunk.
#include "framework/attention/softmax/flash_attention.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "framework/attention/softmax/flash_head.hpp"

namespace attnlab::detail {

template <class T>
FlashScratch<T>::FlashScratch() : buffers_(std::make_unique<Buffers>()) {}
template <class T>
FlashScratch<T>::~FlashScratch() = default;

template <class T>
FlashScratch<T>& thread_flash_scratch() {
  thread_local FlashScratch<T> scratch;
  return scratch;
}

namespace {

// One chunk of keys [c0, c0 + c) against one block of query rows from i0.
template <class T>
struct ForwardChunk {
  const T* keys_t;  // the chunk's K^T [D, Bc]
  const T* values;  // its V rows [c, Dvp], values_ld apart
  std::size_t values_ld;
  std::size_t c0, c;
};

// Rows [i, i + MR) of the block (its row r0 on) against the chunk, in three passes while the chunk's
// [MR, C] logits stay in L1: the logits and each row's max over the chunk (register tiles); per row, the
// running max m raised to that max (the row's output and sum l rescaled by exp(m_old - m_new)), the
// weights exp(x - m) in place and their sum added to l (a streaming pass, whose vectors are
// independent so the core overlaps their exps); then out += P V over the keys the rows see.
template <class T, int MR>
__attribute__((noinline)) void forward_row_tile(const Head<T>& h, const ForwardChunk<T>& ch, std::size_t i, T* scores, T* out, T* row_max, T* row_sum) {
  constexpr std::size_t W = kLanes<T>;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  const std::size_t bc = h.t.bc, dvp = h.t.dvp;
  const RowSpan rows(h.shape, i, MR);
  const std::pair<std::size_t, std::size_t> seen = h.seen_keys(rows, ch.c0, ch.c);
  const std::size_t lo = seen.first, hi = seen.second;
  if (lo >= hi) return;
  const std::size_t v_lo = lo / W, v_hi = (hi + W - 1) / W;
  Vec<T> top[MR];
  for (int r = 0; r < MR; ++r) top[r] = flash::splat(neg_inf);
  store_logits<T, MR>(h, ch.keys_t, ch.c0, rows, i, v_lo, v_hi, scores, top);
  for (int r = 0; r < MR; ++r) {
    T* sr = scores + r * bc;
    const T m_chunk = flash::horizontal_max<T>(top[r]);
    if (m_chunk == neg_inf) {  // the row sees none of these keys (or only padded ones): weights 0
      std::fill(sr + v_lo * W, sr + v_hi * W, T(0));
      continue;
    }
    if (m_chunk > row_max[r]) {
      if (row_max[r] != neg_inf) {  // else the row saw no key before: its sum and output are still 0
        const T alpha = std::exp(row_max[r] - m_chunk);
        row_sum[r] *= alpha;
        for (std::size_t c = 0; c < dvp; ++c) out[r * dvp + c] *= alpha;
      }
      row_max[r] = m_chunk;
    }
    const Vec<T> m = flash::splat(row_max[r]);
    Vec<T> total{};
    for (std::size_t v = v_lo; v < v_hi; ++v) {
      const Vec<T> p = flash::exp<T>(flash::load(sr + v * W) - m);
      flash::store(sr + v * W, p);
      total += p;
    }
    row_sum[r] += flash::horizontal_sum<T>(total);
  }
  flash::for_each_col_tile(0, dvp / W, [&](auto nv, std::size_t v0) {
    constexpr int NV = decltype(nv)::value;
    const Acc<T, MR, NV> acc = flash::multiply<T, MR, NV>(scores, bc, 1, ch.values + v0 * W, ch.values_ld, lo, hi);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        T* o = out + r * dvp + (v0 + v) * W;
        flash::store(o, flash::load(o) + acc.v[r][v]);
      }
  });
}

// A block's output rows (ld apart): the accumulated sum over l, and L = m + log l (zeros and +inf for
// l = 0).
template <class T>
void finish_block(const T* out_acc, const T* row_max, const T* row_sum, std::size_t rows, std::size_t dv, std::size_t dvp, T* out,
                  std::size_t ld, T* lse) {
  for (std::size_t r = 0; r < rows; ++r) {
    if (row_sum[r] > T(0)) {
      const T inv = T(1) / row_sum[r];
      for (std::size_t c = 0; c < dv; ++c) out[r * ld + c] = out_acc[r * dvp + c] * inv;
      lse[r] = row_max[r] + std::log(row_sum[r]);
    } else {
      std::fill(out + r * ld, out + r * ld + dv, T(0));
      lse[r] = std::numeric_limits<T>::infinity();
    }
  }
}

// ---- short heads: query rows in the vector lanes ----

// log lane by lane (xsimd's, where its vectors are the project's; else one by one).
template <class T>
Vec<T> log_lanes(Vec<T> v) {
  if constexpr (sizeof(xsimd::batch<T>) == sizeof(Vec<T>)) {
    xsimd::batch<T> b;
    std::memcpy(&b, &v, sizeof v);
    b = xsimd::log(b);
    std::memcpy(&v, &b, sizeof v);
  } else {
    for (std::size_t l = 0; l < kLanes<T>; ++l) v[l] = std::log(v[l]);
  }
  return v;
}

// Whether a head takes rows_forward: one chunk holds every key and there are at least W/2 query rows
// (a decoding step's single row is the tiles' work: keys in the lanes).
template <class T>
bool rows_in_lanes(const HeadShape& shape, const Tiling<T>& t) {
  return t.chunks == 1 && shape.tq >= kLanes<T> / 2;
}

// The forward with W query rows in a vector's lanes: for each key j the rows' scores as one vector (the
// sum over D of k_jd times the vector of scale q_id), the mask and ALiBi's bias lane by lane; the rows'
// maxima and sums over the keys are then lane-wise maxima and sums, and O^T += v_jc p_j builds the output
// transposed, 16 columns at a time. So the short heads of small models, where the tiles spent their time
// on each row's horizontal max and sum, its exp pass of one or two vectors and the mask of the diagonal
// tile, have no reduction across lanes. A forward alone (a stand-alone copy against flash_forward's tiles,
// causal, best of 2000, 2026-12-07, Intel Xeon): T = 16, D = 16 2.03x faster, T = 32, D = 32 1.40x, T = 64,
// D = 32 1.27x, T = 128, D = 32 1.14x, T = 256, D = 32 1.03x, T = 512 0.96x; so only when one chunk (Bc,
// 128 keys at D = 32, 256 at D = 16) holds the keys. The causal op, forward and backward (`bench attention
// --variants causal --threads 1`, fastest steps, three rounds each): the toy's heads (T = 16, D = 16, 32 x
// 4 of them) 0.147-0.148 -> 0.118-0.119 ms, the GPT's (T = 64, D = 32, 12 x 4) 0.502-0.507 -> 0.468-0.475.
// The backward in the same form (each key's P, dP and dS over the rows' lanes, dK and dV key by key) was
// no faster than the tiles' (0.122 and 0.52 ms) and stays theirs. The scores and the weights are the tiles' to the
// bit (the same sums over D in the same order, the same max and exp); the sum of the weights is taken in
// key order rather than lane by lane and folded, so the output and L move by an ulp or so.
template <class T>
void rows_forward(const HeadShape& shape, const HeadOperands<T>& x, T* out, T* lse, FlashScratch<T>& scratch) {
  constexpr std::size_t W = kLanes<T>;
  constexpr std::size_t kKeys = 8;   // keys whose scores are summed side by side (independent FMA chains)
  constexpr std::size_t kCols = 16;  // output columns summed side by side
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  auto& w = scratch.buffers();
  const std::size_t d = shape.d, dv = shape.dv, dvp = round_up(dv, kCols);
  const T scale = static_cast<T>(shape.scale);
  const T* values = dvp == dv ? x.v : padded_rows(x.v, shape.tk, dv, x.v_ld, dvp, w.v_rows);
  const std::size_t values_ld = dvp == dv ? x.v_ld : dvp;
  T* q_t = w.q_rows.take(d * W);
  T* scores = w.scores.take(shape.tk * W);
  T* o_t = w.out_acc.take(dvp * W);
  const Vec<T> lane = flash::iota<T>(), none = flash::splat(neg_inf);
  const bool alibi = x.slope != T(0);
  for (std::size_t i0 = 0; i0 < shape.tq; i0 += W) {
    const std::size_t rows = std::min(W, shape.tq - i0);
    if (rows < W) std::fill(q_t, q_t + d * W, T(0));
    simd::transpose(x.q + i0 * x.q_ld, rows, d, x.q_ld, q_t, W);
    for (std::size_t c = 0; c < d; ++c) flash::store(q_t + c * W, flash::load(q_t + c * W) * scale);
    Vec<T> first = none, last = none;  // the keys lane l's row sees, [first, last); lanes past the rows none
    for (std::size_t l = 0; l < rows; ++l)
      first[l] = static_cast<T>(shape.first_key(i0 + l)), last[l] = static_cast<T>(shape.last_key(i0 + l));
    const Vec<T> position = lane + static_cast<T>(static_cast<std::int64_t>(i0) + shape.shift());  // p_i
    const std::size_t lo = shape.first_key(i0), hi = shape.last_key(i0 + rows - 1);
    Vec<T> top = none;
    const auto keep = [&](Vec<T> sum, std::size_t j) {  // key j's scores: bias, mask, max
      const T key = static_cast<T>(j);
      if (alibi) {
        const Vec<T> distance = position - key;
        sum = sum - x.slope * flash::max(distance, -distance);
      }
      const bool padded = x.padding && x.padding[j];
      sum = ((key >= first) & (key < last) & !padded) ? sum : none;
      flash::store(scores + (j - lo) * W, sum);
      top = flash::max(sum, top);
    };
    std::size_t j = lo;
    for (; j + kKeys <= hi; j += kKeys) {
      Vec<T> acc[kKeys];
      for (std::size_t kk = 0; kk < kKeys; ++kk) acc[kk] = Vec<T>{};
      const T* kr = x.k + j * x.k_ld;
      for (std::size_t c = 0; c < d; ++c) {
        const Vec<T> qc = flash::load(q_t + c * W);
#pragma GCC unroll 8
        for (std::size_t kk = 0; kk < kKeys; ++kk) acc[kk] += kr[kk * x.k_ld + c] * qc;
      }
      for (std::size_t kk = 0; kk < kKeys; ++kk) keep(acc[kk], j + kk);
    }
    for (; j < hi; ++j) {
      Vec<T> acc{};
      for (std::size_t c = 0; c < d; ++c) acc += x.k[j * x.k_ld + c] * flash::load(q_t + c * W);
      keep(acc, j);
    }
    // A row that sees no key keeps the max -inf: its weights exp(-inf - 0) = 0, its sum 0.
    const Vec<T> m = top == none ? Vec<T>{} : top;
    Vec<T> total{};
    for (std::size_t k = 0; k < hi - lo; ++k) {
      const Vec<T> p = flash::exp<T>(flash::load(scores + k * W) - m);
      flash::store(scores + k * W, p);
      total += p;
    }
    const Vec<T> inv = total > T(0) ? T(1) / total : Vec<T>{};
    for (std::size_t c0 = 0; c0 < dvp; c0 += kCols) {
      Vec<T> acc[kCols];
      for (std::size_t cc = 0; cc < kCols; ++cc) acc[cc] = Vec<T>{};
      for (std::size_t k = 0; k < hi - lo; ++k) {
        const Vec<T> p = flash::load(scores + k * W);
        const T* vr = values + (lo + k) * values_ld + c0;
#pragma GCC unroll 16
        for (std::size_t cc = 0; cc < kCols; ++cc) acc[cc] += vr[cc] * p;
      }
      for (std::size_t cc = 0; cc < kCols; ++cc) flash::store(o_t + (c0 + cc) * W, acc[cc] * inv);
    }
    simd::transpose(o_t, dv, rows, W, out + i0 * x.o_ld, x.o_ld);
    const Vec<T> l = m + log_lanes<T>(total);
    for (std::size_t r = 0; r < rows; ++r) lse[i0 + r] = total[r] > T(0) ? l[r] : std::numeric_limits<T>::infinity();
  }
}

}  // namespace

// float's chunks are never longer than double's (its wider vectors pad D as much or more), so one float
// chunk is one double chunk too.
bool flash_backward_needs_output(const HeadShape& shape) { return shape.tk > tiling<float>(shape).bc; }

template <class T>
void flash_forward(const HeadShape& shape, const HeadOperands<T>& x, T* out, T* lse, FlashScratch<T>& scratch) {
  const Tiling<T> t = tiling<T>(shape);
  if (rows_in_lanes(shape, t)) return rows_forward(shape, x, out, lse, scratch);
  auto& w = scratch.buffers();
  count_padding(x, shape.tk, w.padded_before);
  const std::size_t o_ld = x.o_ld, k_ld = x.k_ld;
  const Head<T> h{shape, x, t, w.padded_before, {x.slope, shape.shift()},
                  scaled_rows(x.q, shape.tq, shape.d, x.q_ld, t.dp, static_cast<T>(shape.scale), w.q_rows)};
  T* keys_t = w.keys_t.take(t.chunks * shape.d * t.bc);
  for (std::size_t c = 0; c < t.chunks; ++c)
    pack_transposed(x.k, shape.d, k_ld, c * t.bc, std::min(t.bc, shape.tk - c * t.bc), t.bc, keys_t + c * shape.d * t.bc);
  // V is read in place, rows their own distance apart, when its rows need no padding to whole vectors.
  const std::size_t v_ld = x.v_ld, values_ld = t.dvp == shape.dv ? v_ld : t.dvp;
  const T* values = t.dvp == shape.dv ? x.v : padded_rows(x.v, shape.tk, shape.dv, v_ld, t.dvp, w.v_rows);
  T* scores = w.scores.take(flash::kTileRows * t.bc);
  T* out_acc = w.out_acc.take(t.br * t.dvp);
  T* row_max = w.row_max.take(t.br);
  T* row_sum = w.row_sum.take(t.br);
  for (std::size_t i0 = 0; i0 < shape.tq; i0 += t.br) {
    const std::size_t rows = std::min(t.br, shape.tq - i0);
    std::fill(out_acc, out_acc + rows * t.dvp, T(0));
    std::fill(row_max, row_max + rows, -std::numeric_limits<T>::infinity());
    std::fill(row_sum, row_sum + rows, T(0));
    const std::size_t key_lo = shape.first_key(i0), key_hi = shape.last_key(i0 + rows - 1);
    for (std::size_t c = key_lo / t.bc; key_lo < key_hi && c * t.bc < key_hi; ++c) {
      const ForwardChunk<T> ch{keys_t + c * shape.d * t.bc, values + c * t.bc * values_ld, values_ld, c * t.bc,
                               std::min(t.bc, shape.tk - c * t.bc)};
      flash::for_each_row_tile(rows, [&](auto mr, std::size_t r0) {
        forward_row_tile<T, decltype(mr)::value>(h, ch, i0 + r0, scores, out_acc + r0 * t.dvp, row_max + r0, row_sum + r0);
      });
    }
    finish_block(out_acc, row_max, row_sum, rows, shape.dv, t.dvp, out + i0 * o_ld, o_ld, lse + i0);
  }
}

template class FlashScratch<float>;
template class FlashScratch<double>;
template FlashScratch<float>& thread_flash_scratch();
template FlashScratch<double>& thread_flash_scratch();
template void flash_forward(const HeadShape&, const HeadOperands<float>&, float*, float*, FlashScratch<float>&);
template void flash_forward(const HeadShape&, const HeadOperands<double>&, double*, double*, FlashScratch<double>&);

}  // namespace attnlab::detail
