// Character-level text: vocabulary, encoding round trip, non-overlapping splits, seeded batches of
// shifted windows, and errors naming the file for missing, empty and folder paths and for splits
// shorter than the block size.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "datasets/char_text.hpp"
#include "datasets/source.hpp"

namespace attnlab::data {
namespace {

TEST(CharText, VocabularyIsTheSortedDistinctCharacters) {
  const CharVocabulary v = CharVocabulary::from_text("hello world");
  EXPECT_EQ(v.chars(), " dehlorw");
  EXPECT_EQ(v.encode("low"), (std::vector<std::int64_t>{4, 5, 7}));  // " dehlorw"
  EXPECT_EQ(v.decode(v.encode("hello world")), "hello world");
  EXPECT_THROW(v.encode("hex"), std::invalid_argument);
  EXPECT_THROW(v.decode({8}), std::invalid_argument);
  EXPECT_EQ(CharVocabulary::from_chars(v.chars()).encode("wo"), v.encode("wo"));
}

TEST(CharText, SplitsArePositionalAndDoNotOverlap) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  const CharTextDataset d = CharTextDataset::from_text(text, 0.9);
  EXPECT_EQ(d.size(Split::train), 900u);
  EXPECT_EQ(d.size(Split::validation), 100u);
  EXPECT_EQ(d.vocabulary().size(), 26u);
}

TEST(CharText, BatchesAreShiftedWindowsAndSeeded) {
  std::string text;
  for (int i = 0; i < 500; ++i) text.push_back(static_cast<char>('a' + (i * 7) % 26));
  const CharTextDataset d = CharTextDataset::from_text(text);
  Generator g1(3), g2(3);
  const TokenBatch a = d.batch(Split::train, 4, 16, g1), b = d.batch(Split::train, 4, 16, g2);
  EXPECT_EQ(a.input.shape(), (Shape{4, 16}));
  EXPECT_EQ(a.input.to_vector(), b.input.to_vector());
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t t = 0; t + 1 < 16; ++t) EXPECT_EQ(a.target.at({r, t}), a.input.at({r, t + 1}));
  // Each window is a stretch of the training text: consecutive characters step by 7 letters.
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t t = 0; t + 1 < 16; ++t)
      EXPECT_EQ((static_cast<int>(a.input.at({r, t + 1})) - static_cast<int>(a.input.at({r, t})) + 26) % 26, 7);
  Generator g3(3);
  EXPECT_THROW(d.batch(Split::validation, 1, 64, g3), std::invalid_argument);  // 50 validation characters
}

TEST(CharText, WindowsWalkTheSplitInOrder) {
  std::string text;
  for (int i = 0; i < 100; ++i) text.push_back(static_cast<char>('a' + i % 26));
  const CharTextDataset d = CharTextDataset::from_text(text, 0.8);  // validation: "cdefg..." (20 characters)
  const TokenBatch w = d.windows(Split::validation, 2, 3, 4);      // starts 2, 6, 10
  EXPECT_EQ(w.input.shape(), (Shape{3, 4}));
  const std::vector<double> in = w.input.to_vector(), target = w.target.to_vector();
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(in[i], static_cast<double>((80 + 2 + i) % 26)) << i;
    EXPECT_EQ(target[i], in[i] == 25 ? 0.0 : in[i] + 1) << i;
  }
  EXPECT_NO_THROW(d.windows(Split::validation, 0, 1, 19));  // the last target is the split's last character
  EXPECT_THROW(d.windows(Split::validation, 0, 1, 20), std::invalid_argument);
  EXPECT_THROW(d.windows(Split::validation, 16, 1, 4), std::invalid_argument);
}

TEST(CharText, AMissingFileSaysHowToGetTheText) {
  try {
    CharTextDataset d("/nonexistent/shakespeare.txt");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/get_data.sh"), std::string::npos) << e.what();
  }
}

// The file's path and the problem: a folder (before: "the text is empty"), an empty file, and a text
// too short for its block size, refused at construction (before: at the first batch, without the file).
TEST(CharText, FileErrorsNameTheFile) {
  const std::string dir = ::testing::TempDir() + "attnlab_char_text_dir", path = dir + "/short.txt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto error_for = [](auto make) -> std::string {
    try {
      make();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  std::string m = error_for([&] { CharTextDataset d(dir); });
  EXPECT_NE(m.find("the text file '" + dir + "' is a folder"), std::string::npos) << m;
  { std::ofstream out(path); }
  m = error_for([&] { CharTextDataset d(path); });
  EXPECT_NE(m.find("the text file '" + path + "' is empty"), std::string::npos) << m;
  m = error_for([&] { CharTextDataset d(dir + "/missing.txt"); });
  EXPECT_NE(m.find(dir + "/missing.txt"), std::string::npos) << m;

  std::ofstream(path) << std::string(40, 'a');
  EXPECT_EQ(error_for([&] { CharTextDataset d(path, 0.9); }), "");  // no block size given: not checked
  EXPECT_EQ(error_for([&] { CharTextDataset d(path, 0.9, 3); }), "");  // validation: 4 characters
  m = error_for([&] { CharTextDataset d(path, 0.9, 8); });
  EXPECT_NE(m.find("the text file '" + path + "' has 40 characters: its validation split (4) is shorter than block_size + 1 (9); "
                   "use a smaller task.block_size or more text"),
            std::string::npos)
      << m;
  m = error_for([&] { CharTextDataset d(path, 0.1, 8); });
  EXPECT_NE(m.find("its training split (4) is shorter than block_size + 1 (9)"), std::string::npos) << m;
  // A dataset built without a block size says the same at its first batch.
  const CharTextDataset d(path, 0.9);
  Generator gen(0);
  m = error_for([&] { d.batch(Split::validation, 1, 8, gen); });
  EXPECT_NE(m.find("the text file '" + path + "' has 40 characters: its validation split (4)"), std::string::npos) << m;
  std::filesystem::remove_all(dir);
}

TEST(CharText, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "attnlab_char_text.txt";
  {
    std::ofstream out(path);
    out << "to be or not to be\n";
  }
  const CharTextDataset d(path, 0.5);
  EXPECT_EQ(d.vocabulary().chars(), "\n benort");
  std::remove(path.c_str());
}

// The vocabulary is bytes: a byte of a character UTF-8 writes in several, and a control character, are
// labelled \xNN, so that every label is valid text (found in review: a report's JSON refused "\xC3" alone,
// and report.html was never written for a French text).
TEST(CharText, LabelsAreTextEvenForBytesOfLongerCharacters) {
  const std::string path = ::testing::TempDir() + "attnlab_char_text_utf8.txt";
  std::ofstream(path) << "caf\xC3\xA9 \x01ok\tdone\nfood and cafe, a fad\n";
  ComponentChoice c;
  c.name = "char_text";
  c.options = ComponentOptions(YAML::Load("{path: " + path + ", block_size: 2}"), "task");
  const auto source = make_data_source(c, TaskFormat::causal_lm);
  std::vector<std::string> labels = source->token_names();
  EXPECT_EQ(labels, (std::vector<std::string>{"\\x01", "\\t", "\\n", "\u2423", ",", "a", "c", "d", "e", "f", "k", "n", "o", "\\xA9", "\\xC3"}));
  EXPECT_EQ(source->token_ids("\\xC3 \\xA9"), (std::vector<std::int64_t>{14, 13}));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace attnlab::data
