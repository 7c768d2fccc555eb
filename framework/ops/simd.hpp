// SIMD vectors through GCC's vector extensions (which clang has too), for the kernels that work on raw
// rows (the fused attention kernel's register tiles, the row kernels of softmax, layer norm and
// cross-entropy).
//
// Vectors are as wide as the build's target allows: 64 bytes (16 floats, 8 doubles) where AVX-512 is
// enabled (-march=native on a CPU that has it: Zen 5 runs 512-bit FMAs at full width, twice the 256-bit
// rate), else 32 bytes (AVX2 + FMA). Everything below is written in lanes, and the tests run whichever
// width the machine builds. Measured on an AVX-512 Zen 5 (2026-11-26, one thread, n = 4096, D = 32):
// softmax attention forward + backward 193-196 ms with 64-byte vectors, 351-452 ms with 32-byte ones.
//
// A sum over a row is W lane sums folded in a fixed tree (horizontal_sum): its bits depend on the row
// and W only, not on where the row lies in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include <xsimd/memory/xsimd_aligned_allocator.hpp>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace attnlab::simd {

// A vector whose data starts on a 64-byte boundary, as a tensor's does (storage.hpp): one cache line, one
// AVX-512 vector. Scratch that vector code reads should not start wherever the heap put it: a load that
// crosses a cache line costs a second access (framework/ops/blas.cpp measured it), and code that takes a
// scalar path up to the first aligned element would round differently with the heap's state.
template <class T>
using AlignedVector = std::vector<T, xsimd::aligned_allocator<T, 64>>;

#ifdef __AVX512F__
constexpr int kVectorBytes = 64;
#else
constexpr int kVectorBytes = 32;
#endif

template <class T>
struct Simd;
template <>
struct Simd<float> {
  typedef float V __attribute__((vector_size(kVectorBytes)));
  typedef std::int32_t I __attribute__((vector_size(kVectorBytes)));
  static constexpr int lanes = kVectorBytes / 4;
  static constexpr int mantissa_bits = 23, exponent_bias = 127;
  // exp's range: at lowest, x log2 e rounds to -127 (2^-127 is built as 0); above highest it is capped
  // (the kernel's arguments are <= 0 up to rounding).
  static constexpr float lowest = -88.0f, highest = 88.0f;
};
template <>
struct Simd<double> {
  typedef double V __attribute__((vector_size(kVectorBytes)));
  typedef std::int64_t I __attribute__((vector_size(kVectorBytes)));
  static constexpr int lanes = kVectorBytes / 8;
  static constexpr int mantissa_bits = 52, exponent_bias = 1023;
  static constexpr double lowest = -709.0, highest = 709.0;
  static constexpr double ln2_hi = 6.93145751953125e-1, ln2_lo = 1.42860682030941723212e-6;  // Cody-Waite split of ln 2
};

template <class T>
using Vec = typename Simd<T>::V;
template <class T>
constexpr std::size_t kLanes = Simd<T>::lanes;

template <class T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
inline Vec<T> splat(T x) {
  return Vec<T>{} + x;
}
// max(a, b) and min(a, b) lane by lane, for operands that are not NaN: one vmaxps / vminps with AVX
// (GCC keeps `a > b ? a : b` as a compare and a blend, two instructions, for the sake of NaN and -0).
inline Vec<float> max(Vec<float> a, Vec<float> b) {
#if defined(__AVX512F__)
  return _mm512_max_ps(a, b);
#elif defined(__AVX__)
  return __builtin_ia32_maxps256(a, b);
#else
  return a > b ? a : b;
#endif
}
inline Vec<double> max(Vec<double> a, Vec<double> b) {
#if defined(__AVX512F__)
  return _mm512_max_pd(a, b);
#elif defined(__AVX__)
  return __builtin_ia32_maxpd256(a, b);
#else
  return a > b ? a : b;
#endif
}
inline Vec<float> min(Vec<float> a, Vec<float> b) {
#if defined(__AVX512F__)
  return _mm512_min_ps(a, b);
#elif defined(__AVX__)
  return __builtin_ia32_minps256(a, b);
#else
  return a < b ? a : b;
#endif
}
inline Vec<double> min(Vec<double> a, Vec<double> b) {
#if defined(__AVX512F__)
  return _mm512_min_pd(a, b);
#elif defined(__AVX__)
  return __builtin_ia32_minpd256(a, b);
#else
  return a < b ? a : b;
#endif
}

// exp(x) lane by lane; exactly 0 at and below `lowest` (so exp(-inf) = 0, and no denormals).
// float: 2^(x log2 e) = 2^n 2^f with n the nearest integer and |f| <= 1/2 (f by one FMA, exact up to
// log2 e's rounding), 2^f by a degree-6 polynomial fitted for relative error (about 1e-7 in float
// arithmetic, 1 ulp); 14 instructions a vector where Cephes' expf with its two-step reduction and
// compare-and-blend clamps took 21 (the attention forward runs one exp per score, GELU one per element).
// double: x = n ln2 + r with ln 2 split in two (Cody-Waite), exp(r) by Taylor to r^13 (error below 1e-17
// relative), for the float64 tests. 2^n is built as a float, (n + bias) in the exponent field, so that n
// one below the smallest normal exponent gives exactly 0.
template <class T>
inline Vec<T> exp(Vec<T> x) {
  using S = Simd<T>;
  using I = typename S::I;
  const Vec<T> clamped = min(max(x, splat<T>(S::lowest)), splat<T>(S::highest));
  // Adding 1.5 * 2^mantissa_bits rounds x log2(e) to an integer n held in the low mantissa bits of t.
  const T magic = T(1.5) * static_cast<T>(std::int64_t{1} << S::mantissa_bits);
  const T log2e = T(1.4426950408889634);
  const Vec<T> t = clamped * log2e + magic;
  const Vec<T> n = t - magic;
  Vec<T> p;
  if constexpr (std::is_same_v<T, float>) {
    const Vec<T> f = clamped * log2e - n;  // contracted to one FMA: the product is not rounded
    p = splat<T>(1.535336178e-4f);
    p = p * f + 1.339887446e-3f;
    p = p * f + 9.618437359e-3f;
    p = p * f + 5.550332471e-2f;
    p = p * f + 2.402264791e-1f;
    p = p * f + 6.931472029e-1f;
    p = p * f + 1.0f;
  } else {
    const Vec<T> r = (clamped - n * S::ln2_hi) - n * S::ln2_lo;
    constexpr double inverse_factorials[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                             1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
                                             1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5,
                                             1.0,                1.0};
    p = splat<T>(inverse_factorials[0]);
    for (std::size_t i = 1; i < sizeof inverse_factorials / sizeof inverse_factorials[0]; ++i) p = p * r + inverse_factorials[i];
  }
  // t's low bits hold n (two's complement; the bits above them shift out).
  const I power = (reinterpret_cast<I>(t) + S::exponent_bias) << S::mantissa_bits;
  return p * reinterpret_cast<Vec<T>>(power);
}

// The lane indices 0, 1, ..., W - 1 as values.
template <class T>
inline Vec<T> iota() {
  Vec<T> v;
  for (std::size_t i = 0; i < kLanes<T>; ++i) v[i] = static_cast<T>(i);
  return v;
}
// v rotated by Half lanes (lane l reads lane (l + Half) mod W), the indices constant at compile time.
template <int Half, class V, int... L>
inline V rotate(V v, std::integer_sequence<int, L...>) {
  return __builtin_shufflevector(v, v, ((L + Half) % static_cast<int>(sizeof...(L)))...);
}
// The lanes of any vector v (W of them) folded in halves (lane l with lane l + W/2, then l + W/4, ...):
// log2(W) shuffles and operations in a fixed order, where a loop over the lanes is W - 1 dependent
// operations (and GCC's `#pragma omp simd reduction` ends the same way, lane after lane through the stack).
template <class V, class Op, int Half = static_cast<int>(sizeof(V) / sizeof(V{}[0])) / 2>
inline auto fold_lanes(V v, Op op) {
  constexpr int W = static_cast<int>(sizeof(V) / sizeof(v[0]));
  if constexpr (Half == 0) {
    return v[0];
  } else {
    return fold_lanes<V, Op, Half / 2>(op(v, rotate<Half>(v, std::make_integer_sequence<int, W>{})), op);
  }
}
template <class T>
inline T horizontal_max(Vec<T> v) {
  return fold_lanes(v, [](Vec<T> a, Vec<T> b) { return a > b ? a : b; });
}
template <class T>
inline T horizontal_sum(Vec<T> v) {
  return fold_lanes(v, [](Vec<T> a, Vec<T> b) { return a + b; });
}

// Sums and maxima over a row of n: W lanes over the whole vectors, folded, then the tail in order.
template <class T>
inline T sum(const T* x, std::size_t n) {
  constexpr std::size_t W = kLanes<T>;
  Vec<T> acc{};
  std::size_t i = 0;
  for (; i + W <= n; i += W) acc += load(x + i);
  T s = horizontal_sum<T>(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}
template <class T>
inline T dot(const T* x, const T* y, std::size_t n) {
  constexpr std::size_t W = kLanes<T>;
  Vec<T> acc{};
  std::size_t i = 0;
  for (; i + W <= n; i += W) acc += load(x + i) * load(y + i);
  T s = horizontal_sum<T>(acc);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// Eight lanes of T (GCC's vector extensions, whatever the build's vector width): a float block converts
// lane for lane to a double one.
template <class T>
struct Eight {
  typedef T V __attribute__((vector_size(8 * sizeof(T))));
};
template <class T>
using Lanes = typename Eight<T>::V;

template <class T>
inline Lanes<T> load_lanes(const T* p) {
  Lanes<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store_lanes(T* p, Lanes<T> v) {
  std::memcpy(p, &v, sizeof v);
}

// The eight lanes' sum, in horizontal_sum's order.
template <class T>
inline T lane_sum(Lanes<T> v) {
  return fold_lanes(v, [](Lanes<T> a, Lanes<T> b) { return a + b; });
}

// dst [cols, rows] (leading dimension ld) = src [rows, cols]^T, src's rows lds apart.
template <class T>
void transpose(const T* src, std::size_t rows, std::size_t cols, std::size_t lds, T* dst, std::size_t ld) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld + i] = src[i * lds + j];
}
template <class T>
void transpose(const T* src, std::size_t rows, std::size_t cols, T* dst, std::size_t ld) {
  transpose(src, rows, cols, cols, dst, ld);
}

namespace detail {
using Float8 = Lanes<float>;
// An 8 x 8 block transposed in registers: pairs of rows interleaved, then pairs of pairs, then halves
// (the unpack / shuffle / permute sequence of AVX, written with the generic vector shuffle that GCC, from
// 12, and clang both have).
inline void transpose_8x8(const float* src, std::size_t lds, float* dst, std::size_t ldd) {
  Float8 r[8], t[8], s[8];
  for (int i = 0; i < 8; ++i) r[i] = load_lanes(src + i * lds);
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = __builtin_shufflevector(r[2 * p], r[2 * p + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[2 * p + 1] = __builtin_shufflevector(r[2 * p], r[2 * p + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int p = 0; p < 2; ++p) {
    s[4 * p] = __builtin_shufflevector(t[4 * p], t[4 * p + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    s[4 * p + 1] = __builtin_shufflevector(t[4 * p], t[4 * p + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    s[4 * p + 2] = __builtin_shufflevector(t[4 * p + 1], t[4 * p + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    s[4 * p + 3] = __builtin_shufflevector(t[4 * p + 1], t[4 * p + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int c = 0; c < 4; ++c) {
    store_lanes(dst + c * ldd, __builtin_shufflevector(s[c], s[c + 4], 0, 1, 2, 3, 8, 9, 10, 11));
    store_lanes(dst + (c + 4) * ldd, __builtin_shufflevector(s[c], s[c + 4], 4, 5, 6, 7, 12, 13, 14, 15));
  }
}
}  // namespace detail

// float, the training type: 8 x 8 blocks in registers (4.5x faster than element by element on a
// [64, 32] block), the edges element by element. Same values, only moved.
inline void transpose(const float* src, std::size_t rows, std::size_t cols, std::size_t lds, float* dst, std::size_t ld) {
  std::size_t i0 = 0;
  for (; i0 + 8 <= rows; i0 += 8) {
    std::size_t j0 = 0;
    for (; j0 + 8 <= cols; j0 += 8) detail::transpose_8x8(src + i0 * lds + j0, lds, dst + j0 * ld + i0, ld);
    for (; j0 < cols; ++j0)
      for (std::size_t i = i0; i < i0 + 8; ++i) dst[j0 * ld + i] = src[i * lds + j0];
  }
  for (; i0 < rows; ++i0)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld + i0] = src[i0 * lds + j];
}
inline void transpose(const float* src, std::size_t rows, std::size_t cols, float* dst, std::size_t ld) {
  transpose(src, rows, cols, cols, dst, ld);
}

}  // namespace attnlab::simd
