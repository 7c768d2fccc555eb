// SCAN: the generated commands and splits against the official files (../shared/data/scan, beside the
// clone), the interpretation of the README's examples, files and vocabularies, and the task's batches.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "datasets/scan.hpp"
#include "datasets/source.hpp"
#include "framework/io/atomic_file.hpp"

namespace attnlab::data {
namespace {

// A task's name and options as YAML ("{split: length}"), as a config chooses it.
ComponentChoice task_choice(const std::string& name, const std::string& options_yaml = "{}") {
  ComponentChoice c;
  c.name = name;
  c.options = ComponentOptions(YAML::Load(options_yaml), "task", std::make_shared<ConfigSource>("t.yaml", options_yaml));
  return c;
}

namespace fs = std::filesystem;

const std::string kOfficial = std::string(ATTNLAB_SOURCE_DIR) + "/../shared/data/scan";

// The official file's pairs as a multiset (command, actions) -> count.
std::map<ScanPair, std::size_t> counted(const std::vector<ScanPair>& pairs) {
  std::map<ScanPair, std::size_t> out;
  for (const ScanPair& p : pairs) ++out[p];
  return out;
}

std::set<ScanPair> as_set(const std::vector<ScanPair>& pairs) { return std::set<ScanPair>(pairs.begin(), pairs.end()); }

class ScanOfficial : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kOfficial + "/tasks.txt")) GTEST_SKIP() << "SCAN's official files are not at " << kOfficial;
  }
};

TEST_F(ScanOfficial, TheGrammarGeneratesExactlyTasksTxt) {
  const std::vector<ScanPair>& generated = scan_commands();
  EXPECT_EQ(generated.size(), 20910u);
  EXPECT_EQ(as_set(generated).size(), 20910u);  // no command twice
  const std::vector<ScanPair> official = read_scan_file(kOfficial + "/tasks.txt");
  EXPECT_EQ(as_set(generated), as_set(official));
}

TEST_F(ScanOfficial, TheLengthSplitEqualsTheOfficialFiles) {
  const ScanData d = scan_split(ScanSplit::length, 0);
  EXPECT_EQ(d.train.size(), 16990u);
  EXPECT_EQ(d.test.size(), 3920u);
  EXPECT_EQ(as_set(d.train), as_set(read_scan_file(kOfficial + "/length_split/tasks_train_length.txt")));
  EXPECT_EQ(as_set(d.test), as_set(read_scan_file(kOfficial + "/length_split/tasks_test_length.txt")));
}

TEST_F(ScanOfficial, TheAddprimJumpSplitEqualsTheOfficialFilesRepeatsIncluded) {
  const ScanData d = scan_split(ScanSplit::addprim_jump, 0);
  const auto train = read_scan_file(kOfficial + "/add_prim_split/tasks_train_addprim_jump.txt");
  EXPECT_EQ(as_set(d.train), as_set(train));
  EXPECT_EQ(counted(d.train), counted(train));  // the bare "jump" 1,467 times, every other command once
  EXPECT_EQ(as_set(d.train).size(), 13204u);
  EXPECT_EQ(as_set(d.test), as_set(read_scan_file(kOfficial + "/add_prim_split/tasks_test_addprim_jump.txt")));
  EXPECT_EQ(d.test.size(), 7706u);
}

TEST(Scan, TheSimpleSplitIsARandomFifthFromItsSeed) {
  const ScanData a = scan_split(ScanSplit::simple, 0), b = scan_split(ScanSplit::simple, 0), c = scan_split(ScanSplit::simple, 1);
  EXPECT_EQ(a.train.size(), 16728u);  // the official files' sizes
  EXPECT_EQ(a.test.size(), 4182u);
  EXPECT_EQ(a.train, b.train);
  EXPECT_NE(as_set(a.test), as_set(c.test));
  std::set<ScanPair> all = as_set(a.train);
  for (const ScanPair& p : a.test) EXPECT_TRUE(all.insert(p).second) << join_words(p.command) << " is in both";
  EXPECT_EQ(all, as_set(scan_commands()));
}

TEST(Scan, InterpretsTheReadmesExamples) {
  const auto run = [](const std::string& command) { return join_words(scan_interpret(split_words(command))); };
  EXPECT_EQ(run("jump"), "I_JUMP");
  EXPECT_EQ(run("jump left"), "I_TURN_LEFT I_JUMP");
  EXPECT_EQ(run("jump around right"), "I_TURN_RIGHT I_JUMP I_TURN_RIGHT I_JUMP I_TURN_RIGHT I_JUMP I_TURN_RIGHT I_JUMP");
  EXPECT_EQ(run("turn left twice"), "I_TURN_LEFT I_TURN_LEFT");
  EXPECT_EQ(run("jump thrice"), "I_JUMP I_JUMP I_JUMP");
  EXPECT_EQ(run("jump opposite left and walk thrice"), "I_TURN_LEFT I_TURN_LEFT I_JUMP I_WALK I_WALK I_WALK");
  EXPECT_EQ(run("jump opposite left after walk around left"),
            "I_TURN_LEFT I_WALK I_TURN_LEFT I_WALK I_TURN_LEFT I_WALK I_TURN_LEFT I_WALK I_TURN_LEFT I_TURN_LEFT I_JUMP");
  EXPECT_EQ(run("turn around right thrice"), join_words(Words(12, "I_TURN_RIGHT")));
}

TEST(Scan, BadCommandsNameTheWord) {
  const auto message = [](const std::string& command) {
    try {
      scan_interpret(split_words(command));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("jump sideways").find("at 'sideways' (word 2)"), std::string::npos) << message("jump sideways");
  EXPECT_NE(message("turn").find("'turn' needs a direction"), std::string::npos);
  EXPECT_NE(message("fly twice").find("at 'fly'"), std::string::npos);
  EXPECT_NE(message("walk and").find("empty"), std::string::npos);
}

TEST(Scan, FilesAreReadAndBadLinesNamed) {
  const std::string dir = ::testing::TempDir() + "attnlab_scan_files";
  fs::create_directories(dir);
  write_file_atomically(dir + "/ok.txt", "IN: jump twice OUT: I_JUMP I_JUMP\n\nIN: walk OUT: I_WALK\n");
  const auto pairs = read_scan_file(dir + "/ok.txt");
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].command, (Words{"jump", "twice"}));
  EXPECT_EQ(pairs[1].actions, (Words{"I_WALK"}));
  write_file_atomically(dir + "/bad.txt", "IN: jump OUT: I_JUMP\njump I_JUMP\n");
  try {
    read_scan_file(dir + "/bad.txt");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/bad.txt:2: expected 'IN: <command> OUT: <actions>'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_scan_file(dir + "/missing.txt"), std::runtime_error);
  fs::remove_all(dir);
}

// A line the format does not allow is an error at its line (and column, for bytes), its bytes made
// visible; a byte-order mark at the start, which some editors write, is skipped.
TEST(Scan, LinesThatAreNotTextOrHoldTwoMarkersAreRefused) {
  const std::string dir = ::testing::TempDir() + "attnlab_scan_bad_lines";
  fs::create_directories(dir);
  const std::string good = "IN: walk OUT: I_WALK\n";
  using namespace std::string_literals;  // "...\0..."s keeps the NUL and ends at the literal's end
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"IN: jump IN: walk OUT: I_JUMP I_WALK\n", ":2: expected 'IN: <command> OUT: <actions>' (one IN: first, one OUT:)"},
      {"IN: jump OUT: I_JUMP OUT: I_WALK\n", ":2: expected 'IN: <command> OUT: <actions>' (one IN: first, one OUT:)"},
      {"IN: jump caf\xe9 OUT: I_JUMP\n", ":2: column 13: the byte \\xe9 is not UTF-8 (is the file Latin-1? save it as UTF-8): 'IN: jump caf\\xe9 OUT: I_JUMP'"},
      {"IN: jump\0 twice OUT: I_JUMP I_JUMP\n"s, ":2: column 9: a NUL byte (is this a binary file?): 'IN: jump\\x00 twice"},
      {"IN: jump\x01 OUT: I_JUMP\n", ":2: column 9: the control character \\x01"},
  };
  for (const auto& [line, message] : cases) {
    write_file_atomically(dir + "/bad.txt", good + line);
    try {
      read_scan_file(dir + "/bad.txt");
      ADD_FAILURE() << "accepted: " << line;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(dir + "/bad.txt" + message), std::string::npos) << e.what();
    }
  }
  write_file_atomically(dir + "/bom.txt", "\xef\xbb\xbfIN: jump OUT: I_JUMP\r\n" + good);
  const auto pairs = read_scan_file(dir + "/bom.txt");
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].command, (Words{"jump"}));
  EXPECT_EQ(pairs[0].actions, (Words{"I_JUMP"}));
  fs::remove_all(dir);
}

// A source typed by a user must hold words, whatever the task reads them as (the checks sit in
// DataSource::encode_source, which no task overrides): empty or blank text, or control characters, are
// errors, for SCAN's words as for the toy tasks' token ids.
TEST(Scan, EmptyOrNonTextSourcesAreRefusedForEveryTask) {
  const auto scan = make_data_source(task_choice("scan", "{split: length}"), TaskFormat::seq2seq);
  EXPECT_EQ(scan->encode_source("jump twice").size(), 2u);
  const auto reverse = make_data_source(task_choice("reverse"), TaskFormat::seq2seq);
  for (const auto* source : {scan.get(), reverse.get()}) {
    for (const std::string text : {"", "   ", "\t"}) EXPECT_THROW(source->encode_source(text), std::invalid_argument) << "'" << text << "'";
    EXPECT_THROW(source->encode_source("3\x01 4"), std::invalid_argument);
  }
}

TEST(Scan, VocabulariesPutSpecialsFirstAndSuggestWords) {
  const Words a{"walk", "jump"}, b{"jump", "twice"};
  const WordVocabulary v({&a, &b});
  EXPECT_EQ(v.size(), 6u);  // pad bos eos jump twice walk
  EXPECT_EQ(v.encode({"jump", "walk"}, "command"), (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(v.decode({3, 4, WordVocabulary::kEos, 5}), "jump twice");
  try {
    v.encode({"jupm"}, "command");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'jupm' is not a word of the command vocabulary; did you mean 'jump'?"), std::string::npos) << e.what();
  }
}

TEST(Scan, BatchesArePaddedWithBosEosAndIgnoredTargets) {
  const auto source = make_data_source(task_choice("scan", "{split: length}"), TaskFormat::seq2seq);
  const DataShape s = source->shape();
  EXPECT_EQ(s.vocab_size, 3u + 13u);  // pad bos eos and the 13 command words
  EXPECT_EQ(s.num_classes, 3u + 6u);  // and the 6 actions
  EXPECT_EQ(s.max_len, 9u);
  EXPECT_EQ(s.target_max_len, 49u);   // BOS and the 48 actions of the longest command
  EXPECT_FALSE(s.shared_vocabulary);
  EXPECT_EQ(source->held_out_batches(1000), 4u);  // 3,920 held-out commands
  const Batch b = source->held_out_batch(0, 8);
  ASSERT_EQ(b.input.size(0), 8u);
  const std::size_t t = b.decoder_input.size(1);
  ASSERT_EQ(b.target.size(1), t);
  for (std::size_t r = 0; r < 8; ++r) {
    EXPECT_EQ(b.decoder_input.at({r, 0}), WordVocabulary::kBos);
    std::size_t length = 0;  // the decoder input's real length: BOS and the actions
    while (length < t && !(b.decoder_padding_mask.defined() && b.decoder_padding_mask.at({r, length}) != 0)) ++length;
    EXPECT_EQ(b.target.at({r, length - 1}), WordVocabulary::kEos);
    for (std::size_t i = 0; i + 1 < length; ++i) EXPECT_EQ(b.target.at({r, i}), b.decoder_input.at({r, i + 1}));  // shifted by one
    for (std::size_t i = length; i < t; ++i) {
      EXPECT_EQ(b.target.at({r, i}), kIgnore);
      EXPECT_EQ(b.decoder_input.at({r, i}), WordVocabulary::kPad);
    }
  }
  EXPECT_EQ(source->decode_target({4, 5, WordVocabulary::kEos, 4}), source->target_label(4) + " " + source->target_label(5));
}

TEST(Scan, FileOptionsAreCheckedTogether) {
  const ComponentChoice c = task_choice("scan", "{path: train.txt}");
  try {
    TaskRegistry::instance().find("scan").options.check(c.options);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("t.yaml:1:8: task.path (training pairs) and task.test_path", 0), 0u) << e.what();  // at the key that is there
  }
}

}  // namespace
}  // namespace attnlab::data
