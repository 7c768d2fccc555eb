// Head detectors with TransformerLens's definitions (transformer_lens/head_detector.py), so that
// attnlab's numbers can be set beside published ones: a detection pattern marks the cells a head of
// that kind attends to, and the "mul" score is the share of the head's attention mass on them. Also the
// repeated-random-tokens induction test of the TransformerLens tutorials. docs/analysis.md gives every
// formula.
//
// A pattern is one head's [queries, keys] mixing matrix, row-major, for one sequence of `tokens`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/tensor/enum_names.hpp"

namespace attnlab {

enum class DetectorKind { previous_token, duplicate_token, induction };
const char* detector_name(DetectorKind kind);  // "previous_token_head", "duplicate_token_head", "induction_head"
std::vector<DetectorKind> detector_kinds();

// TransformerLens's detection pattern for `tokens` ([T, T], 1 on the expected cells, else 0):
//   previous_token_head  (i, i-1)
//   duplicate_token_head (i, j) for j < i with tokens[j] == tokens[i]
//   induction_head       (i, j+1) for j < i with tokens[j] == tokens[i] (and j+1 < i... as TransformerLens)
std::vector<double> detection_pattern(DetectorKind kind, const std::vector<std::int64_t>& tokens);

// How a head's pattern A is compared with a detection pattern D (TransformerLens's error_measure):
//   mul: sum(A * D) / sum(A), the share of the head's attention on the marked cells;
//   abs: 1 - sum|A - D| / rows, one minus the mean over rows of how far each row is from D's.
enum class ErrorMeasure { mul, abs };
const EnumNames<ErrorMeasure>& error_measure_names();  // "mul", "abs"

struct DetectorOptions {
  bool exclude_bos = false;            // zero the first key's column before scoring
  bool exclude_current_token = false;  // zero the diagonal before scoring
  ErrorMeasure error_measure = ErrorMeasure::mul;
  // Only the rows whose query is a real token (tokens[i] >= 0; row_tokens gives padding as -1): what a
  // head does where the task scores it. TransformerLens scores every row, and counts an earlier PAD as
  // a duplicate of a PAD.
  bool scored_rows = false;
};

// The score of one head's [rows, cols] pattern against a detection pattern D ([length, length],
// row-major) over the first `length` queries and keys, after the exclusions: TransformerLens's
// compute_head_attention_similarity_score (and its scored-rows restriction when asked, `tokens` telling
// which rows are padding). NaN when no mass (mul) or no row (abs) is left.
double similarity_score(const double* pattern, std::size_t rows, std::size_t cols, const std::vector<double>& detection,
                        const std::vector<std::int64_t>& tokens, std::size_t length, const DetectorOptions& options);

// similarity_score against the detection pattern of `kind` for the first `length` tokens.
double detector_score(DetectorKind kind, const double* pattern, std::size_t rows, std::size_t cols,
                      const std::vector<std::int64_t>& tokens, std::size_t length, const DetectorOptions& options);

// The repeated-random-tokens induction score: for a sequence of `half` tokens followed by the same
// tokens again (optionally after `offset` leading tokens, e.g. a BOS), the mean attention from each
// token of the second copy to the token after its first occurrence: pattern[offset + half + i,
// offset + i + 1] for i in [0, half - 1).
double repeated_tokens_induction_score(const double* pattern, std::size_t rows, std::size_t cols, std::size_t half,
                                       std::size_t offset = 0);

// Every detector's score summed per head over sequences (NaN scores, of patterns without mass, skipped),
// for the means over examples or probes.
struct DetectorSums {
  std::map<DetectorKind, std::vector<double>> sum, count;
  DetectorSums(std::size_t heads, DetectorOptions options = {});
  // Head k's [t, t] pattern of one sequence, its first `length` positions real.
  void add(std::size_t k, const double* pattern, std::size_t t, const std::vector<std::int64_t>& tokens, std::size_t length);
  std::vector<double> mean(DetectorKind kind) const;  // NaN for a head with no finite score
  DetectorOptions options;
};

}  // namespace attnlab
