// One head of softmax attention as a fused CPU kernel in the FlashAttention-2 manner (flash_forward.cpp,
// flash_backward.cpp), for the blocked op (blocked_attention.cpp): scores, scale, ALiBi bias, masks and
// exp applied tile by tile in registers, no [Tq, Tk] tensor in either direction.
//
// Legend: Tq query tokens, Tk key tokens, D head dim, Dv value dim.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace attnlab::detail {

// One head's shape and which keys each query sees: query i sits at key position p_i = i + Tk - Tq and
// sees keys j with j <= p_i when causal and |p_i - j| <= window when a window is set (0: no window);
// padded keys are excluded separately.
struct HeadShape {
  std::size_t tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 0;
  bool causal = false;
  std::size_t window = 0;

  std::int64_t shift() const { return static_cast<std::int64_t>(tk) - static_cast<std::int64_t>(tq); }
  // Keys row i sees: [first_key(i), last_key(i)); both never decrease with i.
  std::size_t first_key(std::size_t i) const {
    if (!window) return 0;
    return clamp(static_cast<std::int64_t>(i) + shift() - static_cast<std::int64_t>(window), tk);
  }
  std::size_t last_key(std::size_t i) const {
    if (!causal && !window) return tk;
    return clamp(static_cast<std::int64_t>(i) + shift() + 1 + (causal ? 0 : static_cast<std::int64_t>(window)), tk);
  }
  // Rows that see key j < Tk: [first_row(j), end_row(j)), the inverse of the two above.
  std::size_t first_row(std::size_t j) const {
    if (!causal && !window) return 0;
    return clamp(static_cast<std::int64_t>(j) - shift() - (causal ? 0 : static_cast<std::int64_t>(window)), tq);
  }
  std::size_t end_row(std::size_t j) const {
    if (!window) return tq;
    return clamp(static_cast<std::int64_t>(j) - shift() + static_cast<std::int64_t>(window) + 1, tq);
  }

 private:
  static std::size_t clamp(std::int64_t x, std::size_t hi) {
    return x < 0 ? 0 : std::min(hi, static_cast<std::size_t>(x));
  }
};

// One head's operands, row-major: q [Tq, D], k [Tk, D], v [Tk, Dv]; padding [Tk] (true = padded) or null;
// slope ALiBi's m_h (the score of key j gets -m_h |p_i - j|), 0 for no bias. Rows may lie further apart
// than their width (heads read in place from a fused projection [T, 3 H D]): q_ld, k_ld, v_ld are the
// distances between rows of q, k, v and of their gradients dq, dk, dv, o_ld those of the output and its
// gradient (dense heads: D, D, Dv, Dv).
template <class T>
struct HeadOperands {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  const bool* padding = nullptr;
  T slope = 0;
  std::size_t q_ld = 0, k_ld = 0, v_ld = 0, o_ld = 0;
};

// Scratch of one thread, reused across heads (sizes O(T D)).
template <class T>
class FlashScratch {
 public:
  FlashScratch();
  ~FlashScratch();
  struct Buffers;
  Buffers& buffers() { return *buffers_; }

 private:
  std::unique_ptr<Buffers> buffers_;
};

// The calling thread's scratch, kept for the thread's life and grown to the largest head it has run (a
// few MB at T = 4096). Made and freed per parallel region instead, glibc gave a worker's freed buffers
// back to the OS every step (madvise, which also interrupts the other core to flush its TLB) and the
// next region faulted them in again: in the toy step on two threads the worker's half of the attention
// backward took 1.6-1.9x the caller's half (2026-12-06, Intel Xeon).
template <class T>
FlashScratch<T>& thread_flash_scratch();

// out [Tq, Dv] (rows o_ld apart) = softmax(scale q k^T + bias, masked) v and lse [Tq] each row's
// log-sum-exp; a row that sees no key gets zeros and lse = +inf.
template <class T>
void flash_forward(const HeadShape& shape, const HeadOperands<T>& x, T* out, T* lse, FlashScratch<T>& scratch);

// Whether flash_backward needs the forward's output: D_i = dO_i . O_i enters every tile of dS, and when
// the keys span several chunks the backward meets a row's keys chunk by chunk, so it takes D from the
// output; when one chunk holds them all (up to 128 keys at D = 32, 256 at D = 16, the lengths models
// train with) it sums D = sum_j P_ij dP_ij over the row itself, and the output need not be kept.
bool flash_backward_needs_output(const HeadShape& shape);

// dq [Tq, D], dk [Tk, D], dv [Tk, Dv] (overwritten; rows q_ld, k_ld, v_ld apart) from the output
// gradient g [Tq, Dv], the forward's lse and out (rows o_ld apart; out may be null when
// flash_backward_needs_output is false): the weights recomputed tile by tile, dS = scale P (dP - D).
template <class T>
void flash_backward(const HeadShape& shape, const HeadOperands<T>& x, const T* out, const T* lse, const T* g, T* dq, T* dk,
                    T* dv, FlashScratch<T>& scratch);

}  // namespace attnlab::detail
