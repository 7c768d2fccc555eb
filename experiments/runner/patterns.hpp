// What each attention head learned: per-head metrics of a pattern [queries, keys], averaged over the rows
// that have mass. Each row is read as a distribution over keys, |p_ij| / sum_j |p_ij|: for softmax-family
// kernels (rows sum to one, or are all zero for fully masked queries) that is the row itself; for the
// signed, unnormalised mixing of recurrent kernels and Linformer it says where the mixing weight lies,
// whatever its sign. Padding the model masks is left out: queries past the real length do not count, and
// the real key length places the anti-diagonal.
//   entropy         -sum p log p (nats): 0 for a head that looks at one key, log(k) for a uniform one
//   mean_distance   sum p |i - j|: how far a head looks (cross-attention: from the diagonal)
//   diagonal        p(i, i): attending to itself (cross-attention: target position i to source position
//                   i, the alignment of copying)
//   previous_token  p(i, i - 1) (self-attention only)
//   anti_diagonal   p(i, k - 1 - i) over the real k keys: the reversal pattern (cross-attention: target i
//                   to source k - 1 - i, the alignment of reversing)
//   induction       for a query whose token occurred earlier at j, the mass on j + 1 (the token after the
//                   earlier occurrence): the induction-head signature (Olsson et al. 2022); rows without an
//                   earlier occurrence do not count (self-attention only)
//   monotonicity    how the rows' centroids sum_j p j move as the query moves: Goodman and Kruskal's gamma
//                   over pairs of query rows, (concordant - discordant) / (concordant + discordant), pairs
//                   whose centroids lie within 0.05 positions not counted: +1 when every later query looks
//                   further right (a monotone alignment, as translation's mostly is), -1 when further left
//                   (reversal), near 0 without order
// A metric that does not apply to a pattern (induction in cross-attention) is NaN.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace attnlab {

struct HeadMetrics {
  double entropy = 0, mean_distance = 0, diagonal = 0, previous_token = 0, anti_diagonal = 0, induction = 0, monotonicity = 0;
};

// Every metric by name, in the order above: the metrics log, the reports and the tables read this list.
const std::vector<std::pair<const char*, double HeadMetrics::*>>& head_metric_fields();

// Self-attention. pattern: q x k values, row-major (query i is key position i + k - q). tokens: the key
// sequence's tokens (empty: no induction score); a negative token is a pad symbol, which is never matched
// (padding repeats without being content). real_k: the keys before the masked padding (0: all k).
HeadMetrics head_metrics(const double* pattern, std::size_t q, std::size_t k, const std::vector<std::int64_t>& tokens,
                         std::size_t real_k = 0);
// Cross-attention: target queries down, source keys across; real_q and real_k the unpadded lengths.
HeadMetrics cross_metrics(const double* pattern, std::size_t q, std::size_t k, std::size_t real_q, std::size_t real_k);

}  // namespace attnlab
