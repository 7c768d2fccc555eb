// nlohmann-json's exceptions said in words: where the text is cut or wrong, which key is missing, never
// the library's "[json.exception...]" prefix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <functional>

#include "framework/io/json_errors.hpp"

namespace attnlab {
namespace {

std::string text_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return json_error_text(e);
  }
  return "no error";
}

TEST(JsonErrors, SayWhereAndWhatWithoutTheLibrarysCodes) {
  const auto parse = [](const char* text) { return [text] { const auto j = nlohmann::json::parse(text); }; };
  EXPECT_EQ(text_of(parse("{\"step\": 31, \"loss\": 3.4")),
            "line 1, column 25: the text ends in the middle of a value (cut short, as by a kill during a write?)");
  EXPECT_EQ(text_of(parse("{\"a\": 1}\n{x}")), "line 2, column 1: not JSON ('{' where end of input should be)");
  EXPECT_EQ(text_of(parse("{\"a\": tru}")), "line 1, column 10: not JSON (it reads '\"a\": tru}')");
  EXPECT_EQ(text_of([] { const auto j = nlohmann::json::object().at("tables"); }), "no \"tables\" key");
  EXPECT_EQ(text_of([] { const auto s = nlohmann::json(5).get<std::string>(); }), "a value is a number where a string belongs");
}

}  // namespace
}  // namespace attnlab
