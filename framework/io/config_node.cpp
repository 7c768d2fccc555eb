#include "framework/io/config_node.hpp"

#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
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
  os.precision(15);
  os << v;
  return os.str();
}

// Every node of the subtree under `node`, itself first.
void collect_nodes(const YAML::Node& node, std::vector<YAML::Node>& out) {
  out.push_back(node);
  if (node.IsMap()) {
    for (const auto& kv : node) {
      out.push_back(kv.first);
      collect_nodes(kv.second, out);
    }
  } else if (node.IsSequence()) {
    for (const YAML::Node& item : node) collect_nodes(item, out);
  }
}

// Line (1-based) and column of byte `at` of `text`.
std::pair<int, int> position_of(const std::string& text, std::size_t at) {
  int line = 1, column = 1;
  for (std::size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

std::string nth_line(const std::string& text, int line) {
  std::istringstream lines(text);
  std::string s;
  for (int i = 0; i <= line && std::getline(lines, s); ++i) {
  }
  return s;
}

// A parser error of yaml-cpp, said plainly where its own words are unclear.
ConfigError parse_error(const YAML::ParserException& e, const std::string& text, const std::string& file) {
  const int line = e.mark.line + 1, column = e.mark.column + 1;
  if (dynamic_cast<const YAML::DeepRecursion*>(&e)) {
    return ConfigError(file, line, column, "the config nests lists or mappings deeper than YAML can read here (2000 levels); "
                                           "a config needs a few levels at most");
  }
  const std::string source_line = nth_line(text, e.mark.line);
  if (e.msg == YAML::ErrorMsg::MAP_VALUE) {
    const std::size_t colon = source_line.find(':');
    if (colon != std::string::npos && colon > 1024) {
      return ConfigError(file, line, 1, "a key of " + std::to_string(colon) + " characters: YAML reads plain keys of at most 1024; "
                                        "is this line what you meant to write?");
    }
  }
  const bool tab = source_line.find('\t') != std::string::npos;
  return ConfigError(file, line, column, e.msg + (tab ? " (this line holds a tab: YAML indents with spaces only)" : ""));
}

}  // namespace

// ---- ConfigError ----

ConfigError::ConfigError(const std::string& file, int line, int column, const std::string& message)
    : ConfigError(format_position(file, line, column, message), file, line, column, "", message) {}

ConfigError::ConfigError(std::string what, std::string file, int line, int column, std::string origin, std::string message)
    : std::runtime_error(what),
      file_(std::move(file)),
      line_(line),
      column_(column),
      origin_(std::move(origin)),
      message_(std::move(message)) {}

ConfigError ConfigError::at_origin(const std::string& origin, const std::string& message) {
  return ConfigError(origin + ": " + message, "", 0, 0, origin, message);
}

// ---- ConfigSource ----

ConfigSource::ConfigSource(std::string file, std::string text) : file_(std::move(file)), text_(std::move(text)) {}

bool ConfigSource::quoted_over_lines(const YAML::Node& node) const {
  if (text_.empty() || !node.IsScalar() || node.Tag() != "!" || !override_of(node).empty()) return false;
  const YAML::Mark mark = node.Mark();
  if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return false;
  const char quote = text_[static_cast<std::size_t>(mark.pos)];
  if (quote != '"' && quote != '\'') return false;
  for (std::size_t i = static_cast<std::size_t>(mark.pos) + 1; i < text_.size(); ++i) {
    const char c = text_[i];
    if (c == '\n') return true;
    if (quote == '"' && c == '\\') {
      ++i;
    } else if (c == quote) {
      if (quote == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
        ++i;  // '' is a quote inside a single-quoted value
      } else {
        return false;
      }
    }
  }
  return true;
}

void ConfigSource::add_override(const YAML::Node& value, const std::string& origin) {
  Override o;
  collect_nodes(value, o.nodes);
  o.origin = origin;
  overrides_.push_back(std::move(o));
}

std::string ConfigSource::override_of(const YAML::Node& node) const {
  if (!node.IsDefined()) return "";
  // The latest override first: it is the one whose value is in the tree.
  for (auto o = overrides_.rbegin(); o != overrides_.rend(); ++o)
    for (const YAML::Node& n : o->nodes)
      if (n.is(node)) return o->origin;
  return "";
}

ConfigError ConfigSource::error(const YAML::Node& node, const std::string& message) const {
  const std::string origin = override_of(node);
  if (!origin.empty()) return ConfigError::at_origin(origin, message);
  const YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
  const bool known = mark.line >= 0;
  return ConfigError(file_, known ? mark.line + 1 : 0, known ? mark.column + 1 : 0, message);
}

ConfigError ConfigSource::error(const std::string& message) const { return ConfigError(file_, 0, 0, message); }

// ---- documents ----

YAML::Node read_config_document(const std::string& text, const std::string& file) {
  const std::size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    const auto [line, column] = position_of(text, nul);
    throw ConfigError(file, line, column, "the file holds a NUL byte: a config is YAML text (is this a binary file?)");
  }
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    throw parse_error(e, text, file);
  }
  if (documents.empty() || documents[0].IsNull()) {
    throw ConfigError(file, 0, 0, "the config is empty (no keys, only comments or '---'); write at least one key, "
                                  "e.g. name: my_experiment (docs/configs.md lists them all)");
  }
  if (documents.size() > 1) {  // pointed at its '---' (the last one before its first node), not at that node
    const YAML::Mark second = documents[1].Mark();
    std::size_t line = 0, marker = 0;
    for (std::size_t start = 0; start < text.size() && (second.line < 0 || static_cast<int>(line) <= second.line); ++line) {
      if (text.compare(start, 3, "---") == 0 && (start + 3 == text.size() || std::isspace(static_cast<unsigned char>(text[start + 3]))))
        marker = line + 1;
      const std::size_t end = text.find('\n', start);
      if (end == std::string::npos) break;
      start = end + 1;
    }
    throw ConfigError(file, marker ? marker : second.line + 1, marker ? 1 : second.column + 1,
                      "a second YAML document starts here; a config file holds one (remove the '---' and what follows, "
                      "or merge it into the first)");
  }
  return documents[0];
}

std::string read_config_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(path, 0, 0, "is a folder, not a config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;  // ENOENT, EACCES, ...: what the system said
    throw ConfigError(path, 0, 0, fs::exists(path, ec) ? "cannot read the config file: " + std::string(std::strerror(error))
                                                       : "no such config file");
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path, 0, 0, "cannot read the config file");
  return text.str();
}

// ---- Range ----

bool Range::contains(double v) const {
  if (!std::isfinite(v)) return false;
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
  return "any finite number";
}

// ---- ConfigNode ----

ConfigNode::ConfigNode(const YAML::Node& node, std::string path, const std::string& file)
    : ConfigNode(node, std::move(path), std::make_shared<ConfigSource>(file)) {}

ConfigNode::ConfigNode(const YAML::Node& node, std::string path, ConfigSourcePtr source)
    : node_(node), path_(std::move(path)), source_(std::move(source)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    fail_at(node_, (path_.empty() ? std::string("the config") : "'" + path_ + "'") + " must be a mapping of keys to values");
  }
  if (node_.IsMap()) {
    std::set<std::string> seen;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (!it->first.IsScalar()) fail_at(it->first, "a key must be a name, not a list or mapping");
      const std::string key = it->first.Scalar();
      if (!seen.insert(key).second) fail_at(it->first, "duplicate key '" + dotted(key) + "'");
    }
  }
}

std::string ConfigNode::dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

bool ConfigNode::has(const std::string& key) const { return node_.IsMap() && node_[key].IsDefined(); }

YAML::Node ConfigNode::key_node(const std::string& key) const {
  for (auto it = node_.begin(); it != node_.end(); ++it)
    if (it->first.Scalar() == key) return it->first;
  return YAML::Node();
}

void ConfigNode::fail_at(const YAML::Node& node, const std::string& message) const { throw source_->error(node, message); }

void ConfigNode::fail(const std::string& key, const std::string& message) const {
  const std::size_t dot = key.find('.');
  if (!has(key) && dot != std::string::npos && has(key.substr(0, dot))) {  // a nested key: at the deepest part that is there
    const YAML::Node inner = node_[key.substr(0, dot)];
    if (inner.IsMap()) ConfigNode(inner, dotted(key.substr(0, dot)), source_).fail(key.substr(dot + 1), message);
    fail(key.substr(0, dot), message);
  }
  if (!has(key)) fail_at(node_, message);
  const YAML::Node value = node_[key];
  // An empty value has no position of its own (yaml-cpp marks the next token): point at its key, unless
  // an override set it.
  if (value.IsNull() && source_->override_of(value).empty()) fail_at(key_node(key), message);
  fail_at(value, message);
}

void ConfigNode::allow(const std::string& key) { known_.insert(key); }

YAML::Node ConfigNode::child(const std::string& key) {
  known_.insert(key);
  if (!has(key)) return YAML::Node();
  return node_[key];
}

// A section written with no value (`task:` with its keys commented out) would give the defaults without a
// word; `task: {}` asks for them.
ConfigNode ConfigNode::section(const std::string& key) {
  const YAML::Node value = child(key);
  if (has(key) && value.IsNull()) fail(key, "'" + dotted(key) + "' has no value; give its keys (or {} for the defaults) or remove the key");
  return ConfigNode(value, dotted(key), source_);
}

std::errc read_decimal_integer(const std::string& text, std::int64_t& out) {
  const bool plus = !text.empty() && text[0] == '+';
  const char* begin = text.data() + plus;
  const char* end = text.data() + text.size();
  if (begin == end || (*begin == '-' && (plus || begin + 1 == end))) return std::errc::invalid_argument;  // "+", "-", "+-5"
  const auto [ptr, error] = std::from_chars(begin, end, out, 10);
  if (error != std::errc()) return error;
  return ptr == end ? std::errc() : std::errc::invalid_argument;
}

template <class T>
T ConfigNode::get(const std::string& key, const T& default_value, const Range& range) {
  known_.insert(key);
  if (!has(key)) return default_value;
  const YAML::Node value = node_[key];
  const char* type = std::is_same_v<T, bool>                                                  ? "true or false"
                     : std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::size_t> ? "an integer"
                     : std::is_same_v<T, double>                                           ? "a number"
                                                                                           : "a text";
  if (value.IsNull()) fail(key, "'" + dotted(key) + "' has no value; give " + type + " or remove the key");
  if (!value.IsScalar()) fail(key, "'" + dotted(key) + "' must be a single value, not a list or mapping");
  if constexpr (std::is_same_v<T, std::string>) {
    if (source_->quoted_over_lines(value)) {
      fail(key, "the quoted value of '" + dotted(key) + "' runs over several lines; is its closing quote missing?");
    }
  }
  T result{};
  if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::size_t>) {
    std::int64_t v = 0;
    Range whole = range;  // an unsigned key is bounded at 0 besides its own range ("chunk" takes >= 1)
    if (std::is_unsigned_v<T>) whole.low = std::max(whole.low, 0.0);
    const std::errc error = read_decimal_integer(value.Scalar(), v);
    if (error == std::errc::result_out_of_range) {
      fail(key, "'" + dotted(key) + "' must be " + whole.describe() + ", got " + value.Scalar() + ", which does not even fit in 64 bits");
    }
    if (error != std::errc()) fail(key, "'" + dotted(key) + "' must be " + type + ", got '" + value.Scalar() + "'");
    if (std::is_unsigned_v<T> && v < 0) fail(key, "'" + dotted(key) + "' must be " + whole.describe() + ", got " + std::to_string(v));
    result = static_cast<T>(v);
  } else {
    if constexpr (std::is_same_v<T, double>) {  // 1e-400 would read as 0 (grad_clip off), 1e400 as no number
      const std::string& text = value.Scalar();
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(text.c_str(), &end);
      if (!text.empty() && end == text.c_str() + text.size() && errno == ERANGE && (v == 0 || std::isinf(v))) {
        fail(key, "'" + dotted(key) + "' is " + text + ", beyond what a double holds (it would read as " + (v == 0 ? "0" : "infinity") +
                      "); give a number of size 1e-300 to 1e300");
      }
    }
    try {
      result = value.as<T>();
    } catch (const YAML::BadConversion&) {
      fail(key, "'" + dotted(key) + "' must be " + type + ", got '" + value.Scalar() + "'");
    }
  }
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (!range.contains(static_cast<double>(result))) {
      const bool finite = std::isfinite(static_cast<double>(result));
      fail(key, "'" + dotted(key) + "' must be " + (finite ? range.describe() : "a finite number") + ", got " + value.Scalar());
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
    if (!item.IsScalar()) fail_at(item, "'" + dotted(key) + "' must list single values among [" + list + "]");
    const std::string text = item.Scalar();
    if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
      const std::string guess = nearest(text, choices);
      fail_at(item, "'" + dotted(key) + "' lists '" + text + "', which is not among [" + list + "]" +
                        (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
    }
    if (std::find(out.begin(), out.end(), text) != out.end()) fail_at(item, "'" + dotted(key) + "' lists '" + text + "' twice");
    out.push_back(text);
  }
  return out;
}

void ConfigNode::finish() const {
  if (!node_.IsMap()) return;
  const std::vector<std::string> valid(known_.begin(), known_.end());
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (known_.count(key)) continue;
    const std::string guess = nearest(key, valid);
    std::string list;
    for (const auto& k : valid) list += (list.empty() ? "" : ", ") + k;
    // A key an override created has no position; its value knows the override.
    const YAML::Node where = source_->override_of(it->second).empty() ? it->first : it->second;
    fail_at(where, "unknown key '" + dotted(key) + "'" + (guess.empty() ? "" : "; did you mean '" + dotted(guess) + "'?") +
                       " (valid keys: " + (list.empty() ? "none" : list) + ")");
  }
}

}  // namespace attnlab
