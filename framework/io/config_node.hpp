// Reading YAML configs with errors that say where and what to do.
//
// A config is one YAML document read from a file (read_config_document: empty files, a second document,
// NUL bytes, nesting deeper than yaml-cpp allows and over-long keys are errors with a position), plus
// key=value overrides applied on top (apply_override). ConfigSource remembers where every value came
// from, so that an error names the file position of a value written in the file, and the override's own
// text for a value set on the command line: the one place that maps a value to its origin.
//
// Each config struct reads its own mapping through a ConfigNode (usually driven by a Schema, see
// config_schema.hpp):
//
//   ConfigNode node(yaml, "model.attention.options", source);
//   options.dropout = node.get("dropout", 0.0, Range::closed_open(0.0, 1.0));
//   node.finish();   // any key not read is unknown: error naming the nearest valid key
//
// yaml-cpp accepts duplicate keys silently (first wins); ConfigNode rejects them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "framework/tensor/registry.hpp"

namespace attnlab {

// A configuration error and where it is: a file position (line and column 1-based; 0 when unknown), or
// `origin` when the value did not come from a file ("command-line override `train.steps=abc`").
class ConfigError : public std::runtime_error {
 public:
  ConfigError(const std::string& file, int line, int column, const std::string& message);
  // An error located by a free-form origin instead of a file position.
  static ConfigError at_origin(const std::string& origin, const std::string& message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& origin() const { return origin_; }
  const std::string& message() const { return message_; }

 private:
  ConfigError(std::string what, std::string file, int line, int column, std::string origin, std::string message);
  std::string file_;
  int line_, column_;
  std::string origin_, message_;
};

// Where the values of one config came from: the file, and the overrides applied on top of it.
class ConfigSource {
 public:
  // `text` (optional) is the file's text, for checks that need more than yaml-cpp keeps.
  explicit ConfigSource(std::string file = "", std::string text = "");
  const std::string& file() const { return file_; }
  // A quoted scalar of the file whose closing quote is on a later line: in a config that is almost
  // always a missing quote, which would swallow the lines after it into one value.
  bool quoted_over_lines(const YAML::Node& node) const;
  // Records that `value` and everything under it was set by an override; `origin` names it in errors
  // ("command-line override `model.d_model=abc`", or a comparison file's position of a variant's key).
  void add_override(const YAML::Node& value, const std::string& origin);
  // The override that set `node`, or "" when the node comes from the file.
  std::string override_of(const YAML::Node& node) const;
  // An error located at `node`: its override, or its position in the file.
  ConfigError error(const YAML::Node& node, const std::string& message) const;
  // An error about the config as a whole (file name, no position).
  ConfigError error(const std::string& message) const;

 private:
  std::string file_, text_;
  struct Override {
    std::vector<YAML::Node> nodes;  // the value and every node under it
    std::string origin;
  };
  std::vector<Override> overrides_;
};

using ConfigSourcePtr = std::shared_ptr<const ConfigSource>;

// The single YAML document of a config file's text; `file` names it in errors. Rejects NUL bytes, an
// empty document (nothing but comments, or a lone "---"), a second document, nesting deeper than
// yaml-cpp's limit and implicit keys over 1024 characters, each with a position and the fix.
YAML::Node read_config_document(const std::string& text, const std::string& file);
// The text of the config file at `path` (a missing file or a folder is an error naming it).
std::string read_config_text(const std::string& path);

// An integer value's text read in base 10 with an optional sign, as every integer of a config is: "010"
// is ten and "0x10" no integer (yaml-cpp alone reads a leading 0 as octal and 0x as hex, so `steps: 010`
// trained 8 steps; the command line's numbers are base 10 too, experiments/cli_numbers.hpp).
// std::errc::invalid_argument when the text is not such an integer, result_out_of_range when it does not
// fit.
std::errc read_decimal_integer(const std::string& text, std::int64_t& out);

// Sets the dotted key of `assignment` ("train.optimizer.lr=3e-4"; the value is YAML) in `root`,
// creating sections on the way, and records it in `source` with `origin` (default: "command-line
// override `<assignment>`"). Errors name the assignment: no '=', an empty or malformed key part
// ("train.steps.=5"), a value that is not YAML, a key that goes through a value.
void apply_override(YAML::Node& root, const std::string& assignment, ConfigSource& source, std::string origin = "");
// Whether two dotted keys set the same value: the same key, or one a section holding the other ("train"
// and "train.steps").
bool keys_overlap(const std::string& a, const std::string& b);
// Refuses command-line overrides of which two set the same key (`train.steps=3 train.steps=5`: the last
// one won without a word), naming both; assignments without '=' are left to apply_override.
void check_distinct_overrides(const std::vector<std::string>& assignments);

// A YAML subtree kept inside a config struct (a kernel's options). yaml-cpp's Node::operator= writes into
// the node its left side refers to, so a struct holding a plain YAML::Node would change the copies it
// was copied from when assigned; a YamlTree's copies and assignments only rebind the handle.
class YamlTree {
 public:
  YamlTree() = default;
  YamlTree(const YAML::Node& node) : node_(node) {}  // NOLINT: implicit, a tree from a node
  YamlTree(const YamlTree& other) : node_(other.node_) {}
  YamlTree& operator=(const YamlTree& other) {
    node_.reset(other.node_);
    return *this;
  }
  const YAML::Node& node() const { return node_; }
  bool empty() const { return !node_.IsDefined() || node_.IsNull() || (node_.IsMap() && node_.size() == 0); }

 private:
  YAML::Node node_;
};

// An inclusive or half-open numeric range for validation. Every range also requires a finite number.
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
  std::string describe() const;  // "[0, 1)", ">= 1", "any number"
};

class ConfigNode {
 public:
  // `node` may be null or undefined (every key then takes its default); otherwise it must be a mapping.
  ConfigNode(const YAML::Node& node, std::string path, ConfigSourcePtr source);
  // For a config that has no overrides: `file` names it in errors.
  ConfigNode(const YAML::Node& node, std::string path, const std::string& file);

  bool has(const std::string& key) const;
  // Reads a scalar of type T (bool, std::int64_t, std::size_t, double, std::string) with a default and
  // an optional range check for numbers; records the key as known. A key with no value is an error.
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
  // A ConfigNode for the nested mapping at `key` (records the key as known).
  ConfigNode section(const std::string& key);
  // Declares a key as valid without reading it (read elsewhere).
  void allow(const std::string& key);
  // Throws for the first key that was never read or allowed, suggesting the nearest known key.
  void finish() const;

  // An error located at `key`'s value (at the key itself when the value is empty; at the node when the
  // key is absent).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // An error located at `node`, any node of this config.
  [[noreturn]] void fail_at(const YAML::Node& node, const std::string& message) const;
  const std::string& path() const { return path_; }
  std::string dotted(const std::string& key) const;  // path.key
  const ConfigSource& source() const { return *source_; }
  const ConfigSourcePtr& source_ptr() const { return source_; }
  const YAML::Node& node() const { return node_; }

 private:
  YAML::Node key_node(const std::string& key) const;  // the key itself (for positions of empty values)
  YAML::Node node_;
  std::string path_;
  ConfigSourcePtr source_;
  std::set<std::string> known_;
};

}  // namespace attnlab
