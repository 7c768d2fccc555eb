// What each attention head learned: per-head metrics of a pattern [queries, keys] (rows sum to one, or
// are all zero for fully masked queries), averaged over the rows that have mass.
//   entropy         -sum p log p (nats): 0 for a head that looks at one key, log(k) for a uniform one
//   mean_distance   sum p |i - j|: how far a head looks
//   diagonal        p(i, i): attending to itself
//   previous_token  p(i, i - 1)
//   anti_diagonal   p(i, k - 1 - i): the reversal pattern
//   induction       for a query whose token occurred earlier at j, the mass on j + 1 (the token after the
//                   earlier occurrence): the induction-head signature (Olsson et al. 2022); rows without an
//                   earlier occurrence do not count
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace attnlab {

struct HeadMetrics {
  double entropy = 0, mean_distance = 0, diagonal = 0, previous_token = 0, anti_diagonal = 0, induction = 0;
};

// Every metric by name, in the order above: the metrics log, the reports and the tables read this list.
const std::vector<std::pair<const char*, double HeadMetrics::*>>& head_metric_fields();

// pattern: q x k values, row-major. tokens: the key sequence's tokens (empty: no induction score); a
// negative token is padding, which is never matched (padding repeats without being content).
HeadMetrics head_metrics(const double* pattern, std::size_t q, std::size_t k, const std::vector<std::int64_t>& tokens);

}  // namespace attnlab
