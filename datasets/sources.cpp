// The task registry, what every DataSource does unless it says otherwise, and padded rows. Each task is
// its own file (datasets/tasks/, char_text.cpp, scan.cpp) and registers itself there.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>

#include "datasets/source.hpp"
#include "framework/io/text.hpp"

template <>
attnlab::data::TaskRegistry& attnlab::data::TaskRegistry::instance() {
  static attnlab::data::TaskRegistry registry("task");
  return registry;
}

namespace attnlab::data {

std::unique_ptr<DataSource> make_data_source(const ComponentChoice& config, TaskFormat format) {
  const TaskInfo& task = TaskRegistry::instance().find(config.name);
  task.options.check(config.options);
  const auto formats = task.formats(config.options);
  if (std::find(formats.begin(), formats.end(), format) == formats.end()) {
    throw std::invalid_argument("task '" + config.name + "' has no " + task_format_name(format) + " format");
  }
  return task.make(config.options, format);
}

PaddedRows pad_rows(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t fill) {
  std::size_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  std::vector<std::int64_t> ids(rows.size() * longest, fill);
  std::vector<bool> padding(rows.size() * longest, false);
  bool any = false;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    std::copy(rows[b].begin(), rows[b].end(), ids.begin() + static_cast<std::ptrdiff_t>(b * longest));
    for (std::size_t i = rows[b].size(); i < longest; ++i) padding[b * longest + i] = any = true;
  }
  PaddedRows out;
  out.ids = from_indices(ids, {rows.size(), longest});
  if (any) out.mask = from_mask(padding, {rows.size(), longest});
  return out;
}

Batch DataSource::held_out_batch(std::size_t, std::size_t) const {
  throw std::logic_error("this task generates its held-out examples; it has no held-out split to walk");
}

std::vector<std::int64_t> DataSource::encode_source(const std::string& text) const {
  if (const std::string problem = text_problem(text); !problem.empty()) throw std::invalid_argument(problem);
  std::vector<std::int64_t> ids = source_ids(text);
  if (ids.empty()) throw std::invalid_argument("the source is empty: give at least one token");
  return ids;
}

std::vector<std::string> DataSource::token_names() const {
  std::vector<std::string> names;
  for (std::size_t id = 0; id < shape().vocab_size; ++id) names.push_back(token_label(static_cast<std::int64_t>(id), 0));
  return names;
}

std::string Fnv1a::hex() const {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash_));
  return text;
}

std::string DataSource::token_names_hint() const {
  const std::vector<std::string> names = token_names();
  const auto list = [&](std::size_t from, std::size_t to) {
    std::string text;
    for (std::size_t i = from; i < to; ++i) text += (text.empty() ? "" : ", ") + names[i];
    return text;
  };
  if (names.size() <= 16) return list(0, names.size());
  return list(0, 8) + ", ... " + list(names.size() - 4, names.size()) + " (" + std::to_string(names.size()) + " tokens)";
}

std::vector<std::int64_t> DataSource::token_ids(const std::string& text) const {
  if (const std::string problem = text_problem(text); !problem.empty()) throw std::invalid_argument(problem);
  const std::vector<std::string> names = token_names();
  std::vector<std::int64_t> ids;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    const auto it = std::find(names.begin(), names.end(), word);
    if (it == names.end()) throw std::invalid_argument("'" + word + "' is not a token of this task; its tokens are " + token_names_hint());
    ids.push_back(it - names.begin());
  }
  return ids;
}

std::string DataSource::decode_target(const std::vector<std::int64_t>& ids) const {
  const std::int64_t eos = shape().eos;
  std::string text;
  for (std::int64_t id : ids) {
    if (id == eos) break;
    text += (text.empty() ? "" : " ") + target_label(id);
  }
  return text;
}

SequenceMetrics sequence_metrics(const Tensor& logits, const Tensor& target) {
  const std::size_t classes = logits.size(-1);
  if (logits.numel() / std::max<std::size_t>(classes, 1) != target.numel()) {
    throw std::invalid_argument("sequence_metrics: logits " + shape_str(logits.shape()) + " do not match targets " +
                                shape_str(target.shape()));
  }
  const std::vector<double> scores = logits.to_vector(), t = target.to_vector();
  std::vector<double> p(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) {  // argmax, first maximum on ties
    const auto row = scores.begin() + static_cast<std::ptrdiff_t>(i * classes);
    p[i] = static_cast<double>(std::max_element(row, row + static_cast<std::ptrdiff_t>(classes)) - row);
  }
  const std::size_t rows = target.size(0), per_row = t.size() / std::max<std::size_t>(rows, 1);
  SequenceMetrics m;
  std::size_t correct = 0, exact = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    bool all = true;
    for (std::size_t i = r * per_row; i < (r + 1) * per_row; ++i) {
      if (t[i] == static_cast<double>(kIgnore)) continue;
      ++m.scored_tokens;
      if (p[i] == t[i]) {
        ++correct;
      } else {
        all = false;
      }
    }
    exact += all;
  }
  m.token_accuracy = m.scored_tokens ? static_cast<double>(correct) / static_cast<double>(m.scored_tokens) : 0.0;
  m.exact_match = rows ? static_cast<double>(exact) / static_cast<double>(rows) : 0.0;
  return m;
}

}  // namespace attnlab::data
