// The gated delta rule as one op, trained in chunks: the recurrence behind the `delta`, `gated_delta`
// and `decay` kernels (recurrent/recurrent_kernels.cpp). Per head, with a state S [Dk, Dv] from zero,
//   S_t = alpha_t S_{t-1} + k_t u_t^T,   u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t),   o_t = S_t^T q_t,
// which is DeltaNet's delta rule (Yang et al. 2024; alpha = 1), Gated DeltaNet's (Yang et al. 2025), and,
// without the delta correction (u_t = v_t), linear attention with a decaying state: RetNet's retention
// (fixed alpha per head) and the scalar gate of GLA and Mamba-2 (alpha_t from the input).
//
// Chunked form (the WY / UT transform): within a chunk of C tokens, with g_i = alpha_1 ... alpha_i the
// decay from the chunk's start and Gamma_ij = g_i / g_j,
//   (I + diag(beta) strict_lower(K K^T . Gamma)) U = diag(beta) (V - diag(g) K S)     (a triangular solve)
//   O = diag(g) Q S + lower(Q K^T . Gamma) U,      S <- g_C S + K^T diag(g_C / g) U,
// so the work is BLAS products of [C, C], [C, D] and [D, D] blocks, and between chunks one state. The
// forward keeps the state at each chunk's start and U (O(T D) per head when C >= D); the backward runs
// the chunks in reverse with the state's gradient, solving the transposed system once per chunk.
//
// Legend: B batch, H heads, T tokens, C chunk, Dk key dim, Dv value dim.
#pragma once

#include "framework/attention/decode_state.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {

// The epsilon of the L2 norm of q and k (normalise_qk below): x / sqrt(x . x + kQkNormEps).
constexpr double kQkNormEps = 1e-6;

// q, k [B, H, T, Dk], v [B, H, T, Dv]; beta [B, H, T] (undefined: u_t = v_t, no delta correction);
// log_alpha [B, H, T], log alpha_t <= 0 (undefined: alpha = 1). Returns o [B, H, T, Dv], differentiable in
// all five. float32 or float64; `chunk` tokens per chunk (any T; the last chunk may be shorter).
// normalise_qk: the recurrence reads q_t / sqrt(q_t . q_t + kQkNormEps) and likewise k_t, normalised as
// each chunk is loaded, which equals normalising them before the call (tested) without two more passes
// over q and k, forward and backward (they were an eighth of a delta rule's step at head dim 32).
Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha,
                        std::size_t chunk = 32, bool normalise_qk = false);

// The same with every option, and the output RMS-normalised per row as each chunk is made (o_t /
// sqrt(mean(o_t^2) + kQkNormEps), the recurrent kernels' output_norm; equal to normalising afterwards,
// tested) when normalise_output: its factors [B, H, T, 1] go to *output_factors when given (no gradient).
struct DeltaRuleOptions {
  std::size_t chunk = 32;
  bool normalise_qk = false, normalise_output = false;
};
Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha,
                        const DeltaRuleOptions& options, Tensor* output_factors = nullptr);

// The recurrence itself, continued token by token from `state` (decoding; recurrent/delta_rule_step.cpp):
// one matrix S [Dk, Dv] per sequence and head, in double, advanced over the n new tokens of q, k [B, H, n, Dk],
// v [B, H, n, Dv], beta and log_alpha [B, H, n] (or undefined, as above). Returns o [B, H, n, Dv]; no graph.
// O(Dk Dv) per token and head, whatever the length so far. options.normalise_qk and normalise_output as
// the chunked op's (its chunk is not used): the same rows of the same sequence.
Tensor gated_delta_step(MatrixState& state, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha,
                        const DeltaRuleOptions& options);

}  // namespace attnlab
