// User text read from files and the command line (SCAN files, --input, prompts): what makes it unusable
// as text, said with the line and column, and the bytes a message quotes made visible.
#pragma once

#include <string>

namespace attnlab {

// "" when `line` is text: valid UTF-8 without NUL or other control characters (a tab, and a carriage
// return at the end, are allowed); else what is wrong and at which column (1-based, in bytes):
// "column 9: the byte \xe9 is not UTF-8 (is the file Latin-1? save it as UTF-8)".
std::string text_problem(const std::string& line);

// `text` as a message may quote it: control characters and bytes that are not UTF-8 as \xNN, a
// byte-order mark as \uFEFF, cut after `limit` bytes with "...".
std::string printable(const std::string& text, std::size_t limit = 80);

// `text` without a leading UTF-8 byte-order mark (EF BB BF), which some editors write.
std::string without_bom(const std::string& text);

}  // namespace attnlab
