#include "experiments/analysis/detectors.hpp"

#include <cmath>
#include <stdexcept>

namespace attnlab {

const char* detector_name(DetectorKind kind) {
  switch (kind) {
    case DetectorKind::previous_token: return "previous_token_head";
    case DetectorKind::duplicate_token: return "duplicate_token_head";
    case DetectorKind::induction: return "induction_head";
  }
  return "?";
}

std::vector<DetectorKind> detector_kinds() { return {DetectorKind::previous_token, DetectorKind::duplicate_token, DetectorKind::induction}; }

std::vector<double> detection_pattern(DetectorKind kind, const std::vector<std::int64_t>& tokens) {
  const std::size_t t = tokens.size();
  std::vector<double> d(t * t, 0.0);
  for (std::size_t i = 0; i < t; ++i) {
    if (kind == DetectorKind::previous_token) {
      if (i > 0) d[i * t + i - 1] = 1.0;
      continue;
    }
    // Earlier positions j < i holding the same token (TransformerLens: equal tokens, diagonal cleared,
    // lower triangle). The induction pattern is that shifted one key to the right, the first column
    // cleared, and the lower triangle kept: (i, j + 1) with j + 1 <= i.
    for (std::size_t j = 0; j < i; ++j) {
      if (tokens[j] != tokens[i]) continue;
      if (kind == DetectorKind::duplicate_token) d[i * t + j] = 1.0;
      else d[i * t + j + 1] = 1.0;  // j + 1 <= i: inside the lower triangle
    }
  }
  return d;
}

const EnumNames<ErrorMeasure>& error_measure_names() {
  static const EnumNames<ErrorMeasure> names{{"mul", ErrorMeasure::mul}, {"abs", ErrorMeasure::abs}};
  return names;
}

double similarity_score(const double* pattern, std::size_t rows, std::size_t cols, const std::vector<double>& d,
                        const std::vector<std::int64_t>& tokens, std::size_t length, const DetectorOptions& options) {
  if (length > rows || length > cols || length > tokens.size()) {
    throw std::invalid_argument("detector_score: a length of " + std::to_string(length) + " for a " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " pattern of " + std::to_string(tokens.size()) + " tokens");
  }
  if (d.size() != length * length) {
    throw std::invalid_argument("a detection pattern of " + std::to_string(d.size()) + " cells for " + std::to_string(length) +
                                " tokens; it must be [" + std::to_string(length) + ", " + std::to_string(length) + "]");
  }
  double hit = 0, total = 0, distance = 0;
  std::size_t used_rows = 0;
  for (std::size_t i = 0; i < length; ++i) {
    if (options.scored_rows && tokens[i] < 0) continue;  // a padding query
    ++used_rows;
    for (std::size_t j = 0; j < length; ++j) {
      if ((options.exclude_bos && j == 0) || (options.exclude_current_token && i == j)) continue;  // zeroed before scoring
      const double a = pattern[i * cols + j];
      hit += a * d[i * length + j];
      total += a;
      distance += std::fabs(a - d[i * length + j]);
    }
  }
  if (options.error_measure == ErrorMeasure::abs) return used_rows ? 1.0 - distance / static_cast<double>(used_rows) : NAN;
  return total != 0 ? hit / total : NAN;
}

double detector_score(DetectorKind kind, const double* pattern, std::size_t rows, std::size_t cols, const std::vector<std::int64_t>& tokens,
                      std::size_t length, const DetectorOptions& options) {
  if (length > tokens.size()) return similarity_score(pattern, rows, cols, {}, tokens, length, options);  // the length error
  const std::vector<std::int64_t> used(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(length));
  return similarity_score(pattern, rows, cols, detection_pattern(kind, used), tokens, length, options);
}

double repeated_tokens_induction_score(const double* pattern, std::size_t rows, std::size_t cols, std::size_t half, std::size_t offset) {
  if (half < 2 || offset + 2 * half > rows || offset + 2 * half > cols) {
    throw std::invalid_argument("repeated_tokens_induction_score: two copies of " + std::to_string(half) + " tokens after " +
                                std::to_string(offset) + " do not fit a " + std::to_string(rows) + "x" + std::to_string(cols) + " pattern");
  }
  double sum = 0;
  for (std::size_t i = 0; i + 1 < half; ++i) sum += pattern[(offset + half + i) * cols + offset + i + 1];
  return sum / static_cast<double>(half - 1);
}

DetectorSums::DetectorSums(std::size_t heads, DetectorOptions o) : options(o) {
  for (DetectorKind kind : detector_kinds()) sum[kind].assign(heads, 0.0), count[kind].assign(heads, 0.0);
}

void DetectorSums::add(std::size_t k, const double* pattern, std::size_t t, const std::vector<std::int64_t>& tokens, std::size_t length) {
  for (DetectorKind kind : detector_kinds()) {
    const double s = detector_score(kind, pattern, t, t, tokens, length, options);
    if (std::isfinite(s)) sum[kind][k] += s, count[kind][k] += 1;
  }
}

std::vector<double> DetectorSums::mean(DetectorKind kind) const {
  std::vector<double> m;
  for (std::size_t i = 0; i < sum.at(kind).size(); ++i) m.push_back(count.at(kind)[i] ? sum.at(kind)[i] / count.at(kind)[i] : NAN);
  return m;
}

}  // namespace attnlab
