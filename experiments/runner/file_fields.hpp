// How the run folder's JSON and CSV files write a value, in one place: a non-finite number is JSON null
// (and read back as NaN), a CSV number is the shortest text that reads back the same (empty for NaN),
// and a CSV field holding a comma, quote or newline is quoted with quotes doubled.
#pragma once

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace attnlab {

inline nlohmann::ordered_json json_number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); }
inline double number_from_json(const nlohmann::ordered_json& v) { return v.is_number() ? v.get<double>() : NAN; }

// The shortest text that reads back as the same double, "" for NaN (CSV files leave undefined cells empty).
inline std::string csv_number(double v) {
  if (std::isnan(v)) return "";
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, v);
  return std::string(text, result.ptr);
}

inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace attnlab
