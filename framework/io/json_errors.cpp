#include "framework/io/json_errors.hpp"

#include <nlohmann/json.hpp>

#include <regex>

namespace attnlab {

std::string json_error_text(const std::exception& error) {
  std::string what = error.what();
  what = std::regex_replace(what, std::regex(R"(^\[json\.exception\.[a-z_]+\.[0-9]+\] )"), "");
  std::smatch m;
  if (std::regex_search(what, m, std::regex(R"(^parse error at line ([0-9]+), column ([0-9]+): (.*)$)"))) {
    const std::string where = "line " + m[1].str() + ", column " + m[2].str() + ": ", detail = m[3].str();
    if (detail.find("unexpected end of input") != std::string::npos)
      return where + "the text ends in the middle of a value (cut short, as by a kill during a write?)";
    std::smatch part;
    if (std::regex_search(detail, part, std::regex(R"(unexpected (.*); expected (.*)$)")))
      return where + "not JSON (" + part[1].str() + " where " + part[2].str() + " should be)";
    if (std::regex_search(detail, part, std::regex(R"(last read: '([^']*)')"))) return where + "not JSON (it reads '" + part[1].str() + "')";
    return where + "not JSON";
  }
  if (std::regex_search(what, m, std::regex(R"(^parse error: (.*)$)"))) return "not JSON (" + m[1].str() + ")";
  if (std::regex_search(what, m, std::regex(R"(^key '([^']*)' not found$)"))) return "no \"" + m[1].str() + "\" key";
  if (std::regex_search(what, m, std::regex(R"(^type must be ([a-z]+), but is ([a-z]+)$)")))
    return "a value is a " + m[2].str() + " where a " + m[1].str() + " belongs";
  return what;
}

}  // namespace attnlab
