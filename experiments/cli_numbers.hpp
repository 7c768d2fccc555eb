// Numbers on attnlab's command line, read as config keys are (framework/io/config_node.hpp): an integer
// in base 10 only (CLI11 alone reads "08" as octal, "2.5" as out of range and "-1" as 2^64 - 1), every
// number finite and inside its Range, and an error that names the option, what it takes and what came:
// "--threads must be an integer in [0, 256], got 2.5". Bad input exits 2, as every other error.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/io/config_node.hpp"

namespace attnlab::cli {

// What an option of type T takes ("an integer >= 1", "a number in [0, 1)").
template <class T>
std::string takes(const Range& range) {
  Range r = range;
  if constexpr (std::is_unsigned_v<T>) r.low = std::max(r.low, 0.0);
  // A number's range never holds inf or nan (Range::contains): "a finite number >= 0", not ">= 0" alone.
  const std::string kind = std::is_integral_v<T> ? "an integer" : (std::isfinite(r.low) && std::isfinite(r.high) ? "a number" : "a finite number");
  const std::string where = r.describe();
  return where == "any finite number" ? (std::is_integral_v<T> ? kind : "a finite number") : kind + " " + (where[0] == '[' || where[0] == '(' ? "in " : "") + where;
}

// `text` read as T, or a CLI::ValidationError naming `name`.
template <class T>
T parse_number(const std::string& name, const std::string& text, const Range& range) {
  T value{};
  bool ok = !text.empty();
  if constexpr (std::is_integral_v<T>) {
    const char* end = text.data() + text.size();
    const auto [ptr, error] = std::from_chars(text.data() + (!text.empty() && text[0] == '+'), end, value, 10);
    ok = ok && error == std::errc() && ptr == end && (std::is_signed_v<T> || text[0] != '-');
  } else {
    char* end = nullptr;
    value = static_cast<T>(std::strtod(text.c_str(), &end));
    ok = ok && end == text.c_str() + text.size();
  }
  if (!ok || !range.contains(static_cast<double>(value))) throw CLI::ValidationError(name + " must be " + takes<T>(range) + ", got " + text);
  return value;
}

// Adds the option `name` (e.g. "--threads") that reads one number into `value` (its default shown in the
// help), or, for a std::vector, one or more.
template <class T>
CLI::Option* add_number(CLI::App* command, const std::string& name, T& value, const std::string& doc, const Range& range = Range::any()) {
  CLI::Option* option = command->add_option_function<std::string>(
      name, [&value, name, range](const std::string& text) { value = parse_number<T>(name, text, range); }, doc);
  return option->type_name(std::is_integral_v<T> ? "INT" : "FLOAT")->default_str(CLI::detail::to_string(value));
}
template <class T>
CLI::Option* add_number(CLI::App* command, const std::string& name, std::vector<T>& values, const std::string& doc,
                        const Range& range = Range::any()) {
  CLI::Option* option = command->add_option_function<std::vector<std::string>>(
      name,
      [&values, name, range](const std::vector<std::string>& texts) {
        values.clear();
        for (const std::string& t : texts) values.push_back(parse_number<T>(name, t, range));
      },
      doc);
  std::string shown;
  for (const T& v : values) shown += (shown.empty() ? "" : ",") + CLI::detail::to_string(v);
  return option->type_name(std::is_integral_v<T> ? "INT ..." : "FLOAT ...")->default_str("[" + shown + "]")->delimiter(',');
}

}  // namespace attnlab::cli
