// Enums that configs and files spell by name: one table per enum, {name, value} in the order users see
// them, from which the enum's name and parse functions, config validation and the docs all read.
//
//   const EnumNames<Pooling>& pooling_names() { static const EnumNames<Pooling> n{{"mean", Pooling::mean}, ...}; return n; }
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

template <class E>
using EnumNames = std::vector<std::pair<std::string, E>>;

// "a, b, c": the names in table order.
template <class E>
std::string enum_list(const EnumNames<E>& names) {
  std::string out;
  for (const auto& [name, value] : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

template <class E>
const char* enum_name(const EnumNames<E>& names, E value) {
  for (const auto& [name, v] : names)
    if (v == value) return name.c_str();
  return "?";
}

// The value called `text`, or std::invalid_argument "<what> 'x' is not among [a, b]".
template <class E>
E parse_enum(const EnumNames<E>& names, const std::string& text, const std::string& what) {
  for (const auto& [name, value] : names)
    if (name == text) return value;
  throw std::invalid_argument(what + " '" + text + "' is not among [" + enum_list(names) + "]");
}

}  // namespace attnlab
