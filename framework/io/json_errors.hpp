// nlohmann-json's exceptions in words for the person whose file it was: without the library's
// "[json.exception.parse_error.101]" prefix, saying where the text is cut or wrong and what was there.
#pragma once

#include <exception>
#include <string>

namespace attnlab {

// "line 3, column 43: the text ends in the middle of a value (cut short, as by a kill during a write?)",
// "line 1, column 2: not JSON ('x' where a value should be)", "no \"tables\" key", "\"split\" holds a
// number where text belongs", ...
std::string json_error_text(const std::exception& error);

}  // namespace attnlab
