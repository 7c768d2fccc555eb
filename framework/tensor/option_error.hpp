// OptionError: an error about one option of a component configured by key (a task, a model kind, an
// lr schedule). The component names the key within its section, and the config reader turns the error
// into one that points at the line (or the override) that set it.
#pragma once

#include <stdexcept>
#include <string>

namespace attnlab {

// `key` is the key within its section ("gap" for task.gap).
class OptionError : public std::invalid_argument {
 public:
  OptionError(std::string key, const std::string& message) : std::invalid_argument(message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

}  // namespace attnlab
