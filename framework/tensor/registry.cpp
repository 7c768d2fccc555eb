#include "framework/tensor/registry.hpp"

namespace attnlab {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // Close enough to be a typo: at most a third of the word's letters differ (and at least one may).
  if (!best.empty() && best_distance <= std::max<std::size_t>(1, word.size() / 3 + 1)) return best;
  // Or a part of a longer name ("cosine" for "warmup_cosine").
  if (word.size() >= 3) {
    for (const auto& c : candidates)
      if (c.find(word) != std::string::npos) return c;
  }
  return "";
}

}  // namespace attnlab
