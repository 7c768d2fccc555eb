// Overrides (`key=value`, from the command line or a comparison file) applied to a config's YAML, and
// the check that a list of them gives each key once (config_node.hpp).
#include "framework/io/config_node.hpp"

#include <regex>
#include <string>
#include <vector>

namespace attnlab {
namespace {

// A dotted key's parts are names: letters, digits and '_' ("train.optimizer.lr").
const std::regex& key_part() {
  static const std::regex part("[A-Za-z_][A-Za-z0-9_]*");
  return part;
}

// yaml-cpp gives an alias the anchored node itself, so a write into it would change every key that shares
// it (`steps: &ten 10` and `eval_interval: *ten`: an override of train.steps would set both). Along an
// override's path each section is therefore replaced by a map of its own, its entries still the file's
// nodes (their positions kept), and the value is set on an entry of its own.
YAML::Node own_section(YAML::Node parent, const std::string& key) {
  YAML::Node fresh(YAML::NodeType::Map);
  for (const auto& entry : parent[key]) fresh[entry.first] = entry.second;
  parent.remove(key);
  parent[key] = fresh;
  return parent[key];
}

}  // namespace

void apply_override(YAML::Node& root, const std::string& assignment, ConfigSource& source, std::string origin) {
  if (origin.empty()) origin = "command-line override `" + assignment + "`";
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError::at_origin(origin, "an override looks like key=value, e.g. train.steps=500");
  }
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const std::size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const std::string& p : parts) {
    if (!std::regex_match(p, key_part())) {
      throw ConfigError::at_origin(origin, "'" + path + "' is not a dotted key: " +
                                               (p.empty() ? "it has an empty part" : "'" + p + "' is not a key name") +
                                               "; keys are names joined by dots, e.g. train.optimizer.lr");
    }
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError::at_origin(origin, "the value is not valid YAML (" + e.msg + ")");
  }
  if (!value.IsDefined() || value.IsNull()) {
    throw ConfigError::at_origin(origin, "the override has no value; write " + path + "=VALUE");
  }
  if (!root.IsMap()) throw source.error(root, "the config must be a mapping of keys to values");
  std::vector<YAML::Node> chain{root};
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      std::string so_far;
      for (std::size_t j = 0; j <= i; ++j) so_far += (j ? "." : "") + parts[j];
      throw ConfigError::at_origin(origin, "'" + so_far + "' is a value, not a section with keys under it");
    }
    if (!next.IsDefined() || next.IsNull()) {
      YAML::Node section(YAML::NodeType::Map);
      chain.back()[parts[i]] = section;
      source.add_override(section, origin);
      chain.push_back(chain.back()[parts[i]]);
    } else {
      chain.push_back(own_section(chain.back(), parts[i]));
    }
  }
  chain.back().remove(parts.back());
  chain.back()[parts.back()] = value;
  source.add_override(value, origin);
}

bool keys_overlap(const std::string& a, const std::string& b) {
  const std::string& shorter = a.size() <= b.size() ? a : b;
  const std::string& longer = a.size() <= b.size() ? b : a;
  return longer.compare(0, shorter.size(), shorter) == 0 && (longer.size() == shorter.size() || longer[shorter.size()] == '.');
}

void check_distinct_overrides(const std::vector<std::string>& assignments) {
  for (std::size_t i = 0; i < assignments.size(); ++i) {
    const std::size_t eq = assignments[i].find('=');
    if (eq == std::string::npos) continue;
    const std::string key = assignments[i].substr(0, eq);
    for (std::size_t j = 0; j < i; ++j) {
      const std::size_t other_eq = assignments[j].find('=');
      if (other_eq == std::string::npos) continue;
      const std::string other = assignments[j].substr(0, other_eq);
      if (!keys_overlap(key, other)) continue;
      const std::string what = key == other ? "sets '" + key + "' too"
                                            : "sets '" + (key.size() > other.size() ? key : other) + "', which is inside '" +
                                                  (key.size() > other.size() ? other : key) + "'";
      throw ConfigError::at_origin("command-line override `" + assignments[i] + "`",
                                   "`" + assignments[j] + "` " + what + "; give each key once");
    }
  }
}

}  // namespace attnlab
