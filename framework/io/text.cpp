#include "framework/io/text.hpp"

#include <cstdio>

namespace attnlab {
namespace {

constexpr const char* kBom = "\xef\xbb\xbf";

// The length of the UTF-8 sequence at `at` (1 to 4), or 0 when the bytes there are not one.
std::size_t utf8_length(const std::string& s, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(at);
  std::size_t n = 0;
  unsigned min = 0;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) n = 2, min = 0x80;
  else if ((c & 0xf0) == 0xe0) n = 3, min = 0x800;
  else if ((c & 0xf8) == 0xf0) n = 4, min = 0x10000;
  else return 0;
  if (at + n > s.size()) return 0;
  unsigned code = c & (0xff >> (n + 1));
  for (std::size_t i = 1; i < n; ++i) {
    if ((byte(at + i) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(at + i) & 0x3f);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;  // overlong, out of range, surrogate
  return n;
}

std::string hex(unsigned char c) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "\\x%02x", c);
  return buffer;
}

}  // namespace

std::string text_problem(const std::string& line) {
  for (std::size_t i = 0; i < line.size();) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    const std::string column = "column " + std::to_string(i + 1) + ": ";
    if (c == 0) return column + "a NUL byte (is this a binary file?)";
    if ((c < 0x20 && c != '\t' && !(c == '\r' && i + 1 == line.size())) || c == 0x7f) return column + "the control character " + hex(c);
    if (line.compare(i, 3, kBom) == 0) return column + "a byte-order mark (\\uFEFF) inside the text";
    const std::size_t n = utf8_length(line, i);
    if (n == 0) return column + "the byte " + hex(c) + " is not UTF-8 (is the file Latin-1? save it as UTF-8)";
    i += n;
  }
  return "";
}

std::string printable(const std::string& text, std::size_t limit) {
  std::string out;
  std::size_t i = 0;
  for (; i < text.size() && i < limit;) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (text.compare(i, 3, kBom) == 0) {
      out += "\\uFEFF", i += 3;
      continue;
    }
    const std::size_t n = utf8_length(text, i);
    if (n == 0 || (c < 0x20 && c != '\t') || c == 0x7f) {
      out += hex(c), ++i;
      continue;
    }
    out.append(text, i, n);
    i += n;
  }
  if (i < text.size()) out += "...";
  return out;
}

std::string without_bom(const std::string& text) { return text.compare(0, 3, kBom) == 0 ? text.substr(3) : text; }

}  // namespace attnlab
