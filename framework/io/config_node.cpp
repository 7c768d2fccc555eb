#include "framework/io/config_node.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace attnlab {
namespace {

std::string format_position(const std::string& file, int line, int column, const std::string& message) {
  std::string where = file.empty() ? "<config>" : file;
  if (line > 0) where += ":" + std::to_string(line) + ":" + std::to_string(column);
  return where + ": " + message;
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

ConfigError::ConfigError(const std::string& file, int line, int column, const std::string& message)
    : std::runtime_error(format_position(file, line, column, message)),
      file_(file),
      line_(line),
      column_(column),
      message_(message) {}

bool Range::contains(double v) const {
  if (std::isnan(v)) return false;
  if (low_open ? v <= low : v < low) return false;
  if (high_open ? v >= high : v > high) return false;
  return true;
}

std::string Range::describe() const {
  const bool has_low = std::isfinite(low), has_high = std::isfinite(high);
  if (has_low && has_high)
    return std::string(low_open ? "(" : "[") + number_text(low) + ", " + number_text(high) + (high_open ? ")" : "]");
  if (has_low) return std::string(low_open ? "> " : ">= ") + number_text(low);
  if (has_high) return std::string(high_open ? "< " : "<= ") + number_text(high);
  return "any number";
}

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

void fail_at(const YAML::Node& node, const std::string& file, const std::string& message) {
  const YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
  const bool known = mark.line >= 0;
  throw ConfigError(file, known ? mark.line + 1 : 0, known ? mark.column + 1 : 0, message);
}

ConfigNode::ConfigNode(const YAML::Node& node, std::string path, std::string file)
    : node_(node), path_(std::move(path)), file_(std::move(file)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    fail_at(node_, file_, (path_.empty() ? std::string("the config") : path_) + " must be a mapping of keys to values");
  }
  if (node_.IsMap()) {
    std::set<std::string> seen;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      if (!seen.insert(key).second) fail_at(it->first, file_, "duplicate key '" + dotted(key) + "'");
    }
  }
}

std::string ConfigNode::dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

bool ConfigNode::has(const std::string& key) const { return node_.IsMap() && node_[key].IsDefined(); }

void ConfigNode::fail(const std::string& key, const std::string& message) const {
  if (has(key)) fail_at(node_[key], file_, message);
  fail_at(node_, file_, message);
}

void ConfigNode::allow(const std::string& key) { known_.insert(key); }

YAML::Node ConfigNode::child(const std::string& key) {
  known_.insert(key);
  if (!has(key)) return YAML::Node();
  return node_[key];
}

template <class T>
T ConfigNode::get(const std::string& key, const T& default_value, const Range& range) {
  known_.insert(key);
  if (!has(key)) return default_value;
  const YAML::Node value = node_[key];
  if (!value.IsScalar()) fail(key, "'" + dotted(key) + "' must be a single value, not a list or mapping");
  T result;
  try {
    if constexpr (std::is_same_v<T, std::size_t>) {
      const auto v = value.as<std::int64_t>();
      if (v < 0) fail(key, "'" + dotted(key) + "' must be >= 0, got " + std::to_string(v));
      result = static_cast<std::size_t>(v);
    } else {
      result = value.as<T>();
    }
  } catch (const YAML::BadConversion&) {
    const char* type = std::is_same_v<T, bool>                                                  ? "true or false"
                       : std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::size_t> ? "an integer"
                       : std::is_same_v<T, double>                                           ? "a number"
                                                                                             : "a string";
    fail(key, "'" + dotted(key) + "' must be " + type + ", got '" + value.Scalar() + "'");
  }
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (!range.contains(static_cast<double>(result))) {
      fail(key, "'" + dotted(key) + "' must be " + range.describe() + ", got " + value.Scalar());
    }
  }
  return result;
}

template bool ConfigNode::get<bool>(const std::string&, const bool&, const Range&);
template std::int64_t ConfigNode::get<std::int64_t>(const std::string&, const std::int64_t&, const Range&);
template std::size_t ConfigNode::get<std::size_t>(const std::string&, const std::size_t&, const Range&);
template double ConfigNode::get<double>(const std::string&, const double&, const Range&);
template std::string ConfigNode::get<std::string>(const std::string&, const std::string&, const Range&);

std::string ConfigNode::get_choice(const std::string& key, const std::string& default_value,
                                   const std::vector<std::string>& choices) {
  const std::string value = get<std::string>(key, default_value);
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    const std::string guess = nearest(value, choices);
    fail(key, "'" + dotted(key) + "' is '" + value + "', which is not among [" + list + "]" +
                  (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
  }
  return value;
}

std::vector<std::string> ConfigNode::get_choices(const std::string& key, const std::vector<std::string>& default_value,
                                                const std::vector<std::string>& choices) {
  known_.insert(key);
  if (!has(key)) return default_value;
  const YAML::Node value = node_[key];
  if (value.IsScalar()) return {get_choice(key, "", choices)};
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  if (!value.IsSequence()) fail(key, "'" + dotted(key) + "' must be a list of values among [" + list + "]");
  std::vector<std::string> out;
  for (const YAML::Node& item : value) {
    if (!item.IsScalar()) fail_at(item, file_, "'" + dotted(key) + "' must list single values among [" + list + "]");
    const std::string text = item.Scalar();
    if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
      const std::string guess = nearest(text, choices);
      fail_at(item, file_, "'" + dotted(key) + "' lists '" + text + "', which is not among [" + list + "]" +
                               (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
    }
    if (std::find(out.begin(), out.end(), text) != out.end()) fail_at(item, file_, "'" + dotted(key) + "' lists '" + text + "' twice");
    out.push_back(text);
  }
  return out;
}

void ConfigNode::finish() const {
  if (!node_.IsMap()) return;
  const std::vector<std::string> valid(known_.begin(), known_.end());
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (known_.count(key)) continue;
    const std::string guess = nearest(key, valid);
    std::string list;
    for (const auto& k : valid) list += (list.empty() ? "" : ", ") + k;
    fail_at(it->first, file_,
            "unknown key '" + dotted(key) + "'" + (guess.empty() ? "" : "; did you mean '" + dotted(guess) + "'?") +
                " (valid keys: " + (list.empty() ? "none" : list) + ")");
  }
}

}  // namespace attnlab
