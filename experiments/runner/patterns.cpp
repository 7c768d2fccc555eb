#include "experiments/runner/patterns.hpp"

#include <cmath>
#include <cstdlib>

namespace attnlab {

namespace {

// Goodman and Kruskal's gamma between the row index and the rows' centroids (see patterns.hpp).
double monotonicity(const std::vector<double>& centroids) {
  constexpr double kTie = 0.05;
  double concordant = 0, discordant = 0;
  for (std::size_t a = 0; a < centroids.size(); ++a)
    for (std::size_t b = a + 1; b < centroids.size(); ++b) {
      const double d = centroids[b] - centroids[a];
      if (d > kTie) ++concordant;
      if (d < -kTie) ++discordant;
    }
  return concordant + discordant > 0 ? (concordant - discordant) / (concordant + discordant) : 0.0;
}

// The row as a distribution over keys, |p_j| / sum |p_j| (the row itself when it is one already), in
// `buffer`; null for a row without mass (a padded or fully masked query).
const double* as_distribution(const double* row, std::size_t k, std::vector<double>& buffer) {
  double mass = 0;
  for (std::size_t j = 0; j < k; ++j) mass += std::abs(row[j]);
  if (!(mass > 0)) return nullptr;
  buffer.resize(k);
  for (std::size_t j = 0; j < k; ++j) buffer[j] = std::abs(row[j]) / mass;
  return buffer.data();
}

// Entropy and centroid of a row, and its distance from key position i.
void add_row(const double* row, std::size_t k, std::size_t i, HeadMetrics& m, std::vector<double>& centroids) {
  double centroid = 0;
  for (std::size_t j = 0; j < k; ++j) {
    if (row[j] > 0) m.entropy -= row[j] * std::log(row[j]);
    m.mean_distance += row[j] * static_cast<double>(i > j ? i - j : j - i);
    centroid += row[j] * static_cast<double>(j);
  }
  centroids.push_back(centroid);
}

}  // namespace

const std::vector<std::pair<const char*, double HeadMetrics::*>>& head_metric_fields() {
  static const std::vector<std::pair<const char*, double HeadMetrics::*>> fields{
      {"entropy", &HeadMetrics::entropy},   {"mean_distance", &HeadMetrics::mean_distance},
      {"diagonal", &HeadMetrics::diagonal}, {"previous_token", &HeadMetrics::previous_token},
      {"anti_diagonal", &HeadMetrics::anti_diagonal}, {"induction", &HeadMetrics::induction},
      {"monotonicity", &HeadMetrics::monotonicity}};
  return fields;
}

HeadMetrics head_metrics(const double* p, std::size_t q, std::size_t k, const std::vector<std::int64_t>& tokens, std::size_t real_k) {
  HeadMetrics m;
  if (real_k == 0 || real_k > k) real_k = k;
  std::size_t rows = 0, previous_rows = 0, induction_rows = 0;
  std::vector<double> centroids, buffer;
  const std::size_t shift = k >= q ? k - q : 0;  // query i is key position i + shift (causal alignment)
  for (std::size_t r = 0; r < q; ++r) {
    const std::size_t i = r + shift;
    const double* row = i < real_k ? as_distribution(p + r * k, k, buffer) : nullptr;
    if (!row) continue;  // a padded or fully masked query
    ++rows;
    add_row(row, k, i, m, centroids);
    m.diagonal += row[i];
    m.anti_diagonal += row[real_k - 1 - i];
    if (i >= 1) {
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
  m.monotonicity = monotonicity(centroids);
  return m;
}

HeadMetrics cross_metrics(const double* p, std::size_t q, std::size_t k, std::size_t real_q, std::size_t real_k) {
  HeadMetrics m;
  m.previous_token = m.induction = std::nan("");
  real_q = std::min(real_q, q);
  real_k = std::min(real_k, k);
  std::size_t rows = 0, aligned = 0;
  std::vector<double> centroids, buffer;
  for (std::size_t i = 0; i < real_q; ++i) {
    const double* row = as_distribution(p + i * k, k, buffer);
    if (!row) continue;
    ++rows;
    add_row(row, k, i, m, centroids);
    if (i < real_k) {  // a target position with a source position to align to
      m.diagonal += row[i];
      m.anti_diagonal += row[real_k - 1 - i];
      ++aligned;
    }
  }
  if (rows) {
    m.entropy /= static_cast<double>(rows);
    m.mean_distance /= static_cast<double>(rows);
  }
  if (aligned) {
    m.diagonal /= static_cast<double>(aligned);
    m.anti_diagonal /= static_cast<double>(aligned);
  }
  m.monotonicity = monotonicity(centroids);
  return m;
}

}  // namespace attnlab
