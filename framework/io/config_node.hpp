// Reading one YAML mapping into a config struct, with errors that say where (file:line:column) and what
// to do. Each component's config struct reads its own node through a ConfigNode:
//
//   ConfigNode node(yaml, "model.attention.options", "exp.yaml");
//   options.dropout = node.get("dropout", 0.0, Range::closed_open(0.0, 1.0));
//   options.window = node.get<std::int64_t>("window", 8, Range::at_least(1));
//   node.finish();   // any key not read is unknown: error naming the nearest valid key
//
// yaml-cpp accepts duplicate keys silently (first wins); ConfigNode rejects them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {

// A configuration error with its position (line and column 1-based; 0 when unknown).
class ConfigError : public std::runtime_error {
 public:
  ConfigError(const std::string& file, int line, int column, const std::string& message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_, column_;
  std::string message_;
};

// An inclusive or half-open numeric range for validation.
struct Range {
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
  bool low_open = false, high_open = false;
  static Range any() { return {}; }
  static Range at_least(double low) { return {low, std::numeric_limits<double>::infinity(), false, false}; }
  static Range greater_than(double low) { return {low, std::numeric_limits<double>::infinity(), true, false}; }
  static Range closed(double low, double high) { return {low, high, false, false}; }
  static Range closed_open(double low, double high) { return {low, high, false, true}; }
  static Range open(double low, double high) { return {low, high, true, true}; }
  bool contains(double v) const;
  std::string describe() const;
};

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `word` when it is close enough to be a likely typo; empty otherwise.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

class ConfigNode {
 public:
  // `node` may be null or undefined (every key then takes its default); otherwise it must be a mapping.
  ConfigNode(const YAML::Node& node, std::string path, std::string file);

  bool has(const std::string& key) const;
  // Reads a scalar of type T (bool, std::int64_t, std::size_t, double, std::string) with a default and
  // an optional range check for numbers; records the key as known.
  template <class T>
  T get(const std::string& key, const T& default_value, const Range& range = Range::any());
  // A value that must be one of `choices`.
  std::string get_choice(const std::string& key, const std::string& default_value, const std::vector<std::string>& choices);
  // A list of distinct values, each one of `choices` (a single value reads as a list of one; [] is
  // empty). Errors point at the offending element.
  std::vector<std::string> get_choices(const std::string& key, const std::vector<std::string>& default_value,
                                       const std::vector<std::string>& choices);
  // A sub-node (mapping or null) for a nested struct; records the key as known.
  YAML::Node child(const std::string& key);
  // Declares a key as valid without reading it (read elsewhere).
  void allow(const std::string& key);
  // Throws for the first key that was never read or allowed, suggesting the nearest known key.
  void finish() const;

  // An error located at `key`'s value (or at the node when the key is absent).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  const YAML::Node& node() const { return node_; }

 private:
  std::string dotted(const std::string& key) const;
  YAML::Node node_;
  std::string path_, file_;
  std::set<std::string> known_;
};

// Location helpers for errors raised outside a ConfigNode.
[[noreturn]] void fail_at(const YAML::Node& node, const std::string& file, const std::string& message);

}  // namespace attnlab
