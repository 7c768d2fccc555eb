#include "experiments/runner/patterns.hpp"

#include <cmath>
#include <cstdlib>

namespace attnlab {

const std::vector<std::pair<const char*, double HeadMetrics::*>>& head_metric_fields() {
  static const std::vector<std::pair<const char*, double HeadMetrics::*>> fields{
      {"entropy", &HeadMetrics::entropy},   {"mean_distance", &HeadMetrics::mean_distance},
      {"diagonal", &HeadMetrics::diagonal}, {"previous_token", &HeadMetrics::previous_token},
      {"anti_diagonal", &HeadMetrics::anti_diagonal}, {"induction", &HeadMetrics::induction}};
  return fields;
}

HeadMetrics head_metrics(const double* p, std::size_t q, std::size_t k, const std::vector<std::int64_t>& tokens) {
  HeadMetrics m;
  std::size_t rows = 0, previous_rows = 0, induction_rows = 0;
  const std::size_t shift = k >= q ? k - q : 0;  // query i is key position i + shift (causal alignment)
  for (std::size_t r = 0; r < q; ++r) {
    const double* row = p + r * k;
    double mass = 0;
    for (std::size_t j = 0; j < k; ++j) mass += row[j];
    if (mass <= 0) continue;  // a fully masked query
    ++rows;
    const std::size_t i = r + shift;
    for (std::size_t j = 0; j < k; ++j) {
      if (row[j] > 0) m.entropy -= row[j] * std::log(row[j]);
      m.mean_distance += row[j] * static_cast<double>(i > j ? i - j : j - i);
    }
    if (i < k) m.diagonal += row[i];
    if (i < k) m.anti_diagonal += row[k - 1 - i];
    if (i >= 1 && i - 1 < k) {
      m.previous_token += row[i - 1];
      ++previous_rows;
    }
    if (!tokens.empty() && i < tokens.size() && tokens[i] >= 0) {
      double score = 0;
      bool earlier = false;
      for (std::size_t j = 0; j + 1 < i; ++j)
        if (tokens[j] == tokens[i]) {
          earlier = true;
          score += row[j + 1];
        }
      if (earlier) {
        m.induction += score;
        ++induction_rows;
      }
    }
  }
  if (rows) {
    m.entropy /= static_cast<double>(rows);
    m.mean_distance /= static_cast<double>(rows);
    m.diagonal /= static_cast<double>(rows);
    m.anti_diagonal /= static_cast<double>(rows);
  }
  if (previous_rows) m.previous_token /= static_cast<double>(previous_rows);
  if (induction_rows) m.induction /= static_cast<double>(induction_rows);
  return m;
}

}  // namespace attnlab
