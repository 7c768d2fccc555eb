// Clean/corrupted pairs for activation patching, for every task and format that has them: the batches
// have one shape and one layout (pads, separators, end tokens and scored positions where the first
// example has them), the inputs differ only where each task's corruption says, the targets at the scored
// position are the two answers, the clean sources are held out, and the same generator gives the same set.
// SCAN's sets: held-out commands of one shape, one primitive changed, the actions the interpreter's.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "datasets/scan.hpp"
#include "datasets/source.hpp"
#include "datasets/toy_tasks.hpp"
#include "framework/io/atomic_file.hpp"

namespace attnlab::data {
namespace {

// A task's name and options as YAML ("{split: length}"), as a config chooses it.
ComponentChoice task_choice(const std::string& name, const std::string& options_yaml = "{}") {
  ComponentChoice c;
  c.name = name;
  c.options = ComponentOptions(YAML::Load(options_yaml), "task");
  return c;
}

// A toy task's name and options as these tests vary them; choice() gives each task the keys it reads.
struct ToyTaskOptions {
  std::string name;
  std::size_t length = 8, min_length = 0, symbols = 10, pairs = 4, queries = 0, gap = 0, sequence_length = 0;
  bool random_filler = true;
  double held_out_fraction = 0.1;
  ComponentChoice choice() const {
    const OptionsSpec& spec = TaskRegistry::instance().find(name).options;
    YAML::Node n(YAML::NodeType::Map);
    const auto put = [&](const char* key, auto value) {
      if (spec.reads(key)) n[key] = value;
    };
    put("length", length), put("min_length", min_length), put("symbols", symbols), put("pairs", pairs), put("queries", queries);
    put("gap", gap), put("sequence_length", sequence_length), put("random_filler", random_filler), put("held_out_fraction", held_out_fraction);
    ComponentChoice c;
    c.name = name;
    c.options = ComponentOptions(n, "task");
    return c;
  }
};

using Row = std::vector<std::int64_t>;

// The rows of a [B, T] id tensor.
std::vector<Row> rows(const Tensor& t) {
  std::vector<Row> out;
  const std::int64_t* p = t.data<std::int64_t>();
  for (std::size_t r = 0; r < t.size(0); ++r) out.emplace_back(p + r * t.size(1), p + (r + 1) * t.size(1));
  return out;
}

// Positions where two rows differ.
std::vector<std::size_t> differences(const Row& a, const Row& b) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) at.push_back(i);
  return at;
}

std::size_t first_difference(const Row& a, const Row& b) { return differences(a, b).empty() ? a.size() : differences(a, b)[0]; }

// Which positions of a row hold one of `tokens` (a layout to compare across examples).
std::vector<bool> where(const Row& row, const std::set<std::int64_t>& tokens) {
  std::vector<bool> at;
  for (std::int64_t t : row) at.push_back(tokens.count(t) > 0);
  return at;
}

void expect_same_mask(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (a.defined()) {
    EXPECT_EQ(a.to_vector(), b.to_vector()) << what;
  }
}

struct Case {
  std::string name;
  TaskFormat format;
  ToyTaskOptions options;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  ToyTaskOptions induction;
  induction.name = "induction", induction.length = 8, induction.symbols = 10;
  out.push_back({"induction", TaskFormat::causal_lm, induction});
  induction.gap = 4, induction.symbols = 16;
  out.push_back({"induction_gap", TaskFormat::causal_lm, induction});
  ToyTaskOptions mqar;
  mqar.name = "mqar", mqar.pairs = 4, mqar.symbols = 16;
  out.push_back({"mqar", TaskFormat::causal_lm, mqar});
  mqar.queries = 6;
  out.push_back({"mqar_6_queries", TaskFormat::causal_lm, mqar});
  mqar.queries = 0, mqar.sequence_length = 48;
  for (bool filler : {true, false}) {
    mqar.random_filler = filler;
    const std::string name = filler ? "mqar_zoology" : "mqar_zoology_pad";
    out.push_back({name, TaskFormat::causal_lm, mqar});
    out.push_back({name + "_tagging", TaskFormat::tagging, mqar});
  }
  for (const std::string task : {"copy", "reverse", "sort"})
    for (std::size_t min_length : {0, 3}) {
      ToyTaskOptions o;
      o.name = task, o.length = 7, o.min_length = min_length, o.symbols = 6;
      for (TaskFormat f : {TaskFormat::causal_lm, TaskFormat::tagging, TaskFormat::seq2seq})
        out.push_back({task + (min_length ? "_varying_" : "_") + task_format_name(f), f, o});
    }
  return out;
}

std::unique_ptr<DataSource> source_of(const ToyTaskOptions& o, TaskFormat format) { return make_data_source(o.choice(), format); }

bool causal_layout(const Case& c) { return c.format == TaskFormat::causal_lm || c.options.sequence_length != 0; }

TEST(PatchingPairs, EveryExampleOfASetHasOneShapeAndOneLayout) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto source = source_of(c.options, c.format);
    Generator gen(5);
    const PatchingPairs pairs = source->patching_pairs(16, gen);
    ASSERT_EQ(pairs.size(), 16u);
    ASSERT_EQ(pairs.clean_answer.size(), 16u);
    ASSERT_EQ(pairs.corrupted_answer.size(), 16u);
    EXPECT_FALSE(pairs.corruption.empty());
    const Batch &clean = pairs.clean, &corrupted = pairs.corrupted;
    ASSERT_EQ(clean.input.shape(), corrupted.input.shape());
    ASSERT_EQ(clean.target.shape(), corrupted.target.shape());
    expect_same_mask(clean.key_padding_mask, corrupted.key_padding_mask, "key padding");
    EXPECT_FALSE(clean.key_padding_mask.defined()) << "a set has one length: nothing to pad";
    ASSERT_EQ(clean.decoder_input.defined(), c.format == TaskFormat::seq2seq);
    if (clean.decoder_input.defined()) {
      ASSERT_EQ(clean.decoder_input.shape(), corrupted.decoder_input.shape());
      expect_same_mask(clean.decoder_padding_mask, corrupted.decoder_padding_mask, "decoder padding");
    }
    const std::int64_t eos = source->shape().eos;
    for (const Batch* b : {&clean, &corrupted}) {
      const auto input = rows(b->input), target = rows(b->target);
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        EXPECT_EQ(where(input[i], {kPad, kSep}), where(input[0], {kPad, kSep})) << "example " << i;
        EXPECT_EQ(where(target[i], {kIgnore}), where(target[0], {kIgnore})) << "example " << i;  // scored positions
        EXPECT_EQ(where(target[i], {eos}), where(target[0], {eos})) << "example " << i;
        if (b->decoder_input.defined()) {
          EXPECT_EQ(where(rows(b->decoder_input)[i], {kPad, kSep}), where(rows(b->decoder_input)[0], {kPad, kSep}));
        }
      }
    }
  }
}

TEST(PatchingPairs, TheTargetsAtTheScoredPositionAreTheTwoAnswers) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Generator gen(6);
    const PatchingPairs pairs = source_of(c.options, c.format)->patching_pairs(16, gen);
    ASSERT_EQ(pairs.size(), 16u);
    const auto clean = rows(pairs.clean.target), corrupted = rows(pairs.corrupted.target);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      ASSERT_LT(pairs.position[i], clean[i].size());
      EXPECT_NE(pairs.clean_answer[i], pairs.corrupted_answer[i]) << "example " << i;
      EXPECT_EQ(clean[i][pairs.position[i]], pairs.clean_answer[i]) << "example " << i;
      EXPECT_EQ(corrupted[i][pairs.position[i]], pairs.corrupted_answer[i]) << "example " << i;
      // The scored position is the first answer token that changes (sort's moves with the changed symbol).
      EXPECT_EQ(first_difference(clean[i], corrupted[i]), pairs.position[i]) << "example " << i;
    }
  }
}

// copy, reverse, sort: one source token, the middle one of the set's length, and after the scored
// position the answer the corrupted example reads (causal_lm) or its decoder reads (seq2seq).
void expect_one_source_token_changed(const Case& c, const PatchingPairs& pairs) {
  const auto clean = rows(pairs.clean.input), corrupted = rows(pairs.corrupted.input);
  const std::size_t length = causal_layout(c) ? std::find(clean[0].begin(), clean[0].end(), kSep) - clean[0].begin() : clean[0].size();
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_NE(clean[i][length / 2], corrupted[i][length / 2]) << "example " << i;
    for (std::size_t at : differences(clean[i], corrupted[i]))
      EXPECT_TRUE(at == length / 2 || (causal_layout(c) && at > pairs.position[i])) << "example " << i << " differs at " << at;
    if (!pairs.clean.decoder_input.defined()) continue;
    for (std::size_t at : differences(rows(pairs.clean.decoder_input)[i], rows(pairs.corrupted.decoder_input)[i]))
      EXPECT_GT(at, pairs.position[i]) << "example " << i << ": the decoder reads the clean answer up to the scored position";
  }
}

// induction: the first copy (at one offset for the set) re-ordered, nothing else; the answers are what
// follows the current token in each first copy.
void expect_first_copy_reordered(const Case& c, const PatchingPairs& pairs) {
  const auto clean = rows(pairs.clean.input), corrupted = rows(pairs.corrupted.input);
  const std::size_t offset = std::find_if(clean[0].begin(), clean[0].end(), [](std::int64_t t) { return t != kPad; }) - clean[0].begin();
  const std::size_t length = c.options.length, sep = length + c.options.gap;
  ASSERT_EQ(clean[0][sep], kSep);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_GT(pairs.position[i], sep) << "scored inside the repeat, after its first token";
    EXPECT_LT(pairs.position[i], sep + length);
    for (std::size_t at : differences(clean[i], corrupted[i])) EXPECT_TRUE(at >= offset && at < offset + length) << "differs at " << at;
    const Row first(clean[i].begin() + offset, clean[i].begin() + offset + length);
    const Row shuffled(corrupted[i].begin() + offset, corrupted[i].begin() + offset + length);
    EXPECT_TRUE(std::is_permutation(first.begin(), first.end(), shuffled.begin())) << "example " << i;
    const std::int64_t current = clean[i][pairs.position[i]];
    ASSERT_EQ(std::count(first.begin(), first.end(), current), 1) << "example " << i;
    const std::size_t in_first = std::find(first.begin(), first.end(), current) - first.begin();
    const std::size_t in_shuffled = std::find(shuffled.begin(), shuffled.end(), current) - shuffled.begin();
    ASSERT_LT(in_shuffled + 1, length);
    EXPECT_EQ(first[in_first + 1], pairs.clean_answer[i]);
    EXPECT_EQ(shuffled[in_shuffled + 1], pairs.corrupted_answer[i]);
  }
}

// mqar: one value of the pairs, the one of the key read at the scored position (its query).
void expect_one_value_changed(const Case& c, const PatchingPairs& pairs) {
  const auto clean = rows(pairs.clean.input), corrupted = rows(pairs.corrupted.input);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::vector<std::size_t> at = differences(clean[i], corrupted[i]);
    ASSERT_EQ(at.size(), 1u) << "example " << i;
    const std::size_t value = at[0];
    EXPECT_TRUE(value < 2 * c.options.pairs && value % 2 == 1) << "a value of the pairs, not " << value;
    EXPECT_EQ(clean[i][value - 1], clean[i][pairs.position[i]]) << "the changed value's key is the query";
    EXPECT_EQ(clean[i][value], pairs.clean_answer[i]);
    EXPECT_EQ(corrupted[i][value], pairs.corrupted_answer[i]);
    EXPECT_EQ(differences(rows(pairs.clean.target)[i], rows(pairs.corrupted.target)[i]), std::vector<std::size_t>{pairs.position[i]});
    if (c.options.sequence_length == 0) continue;
    for (std::size_t k = 1; k < 2 * c.options.pairs; k += 2)  // Zoology's values stay distinct
      if (k != value) {
        EXPECT_NE(clean[i][k], pairs.corrupted_answer[i]);
      }
  }
}

TEST(PatchingPairs, TheInputsDifferOnlyWhereTheCorruptionSays) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Generator gen(7);
    const PatchingPairs pairs = source_of(c.options, c.format)->patching_pairs(16, gen);
    ASSERT_EQ(pairs.size(), 16u);
    if (c.options.name == "induction") {
      expect_first_copy_reordered(c, pairs);
    } else if (c.options.name == "mqar") {
      expect_one_value_changed(c, pairs);
    } else {
      expect_one_source_token_changed(c, pairs);
    }
  }
}

TEST(PatchingPairs, VaryingLengthsMeetInOneLengthPerSet) {
  ToyTaskOptions o;
  o.name = "reverse", o.length = 7, o.min_length = 2, o.symbols = 6;
  const auto source = source_of(o, TaskFormat::tagging);
  std::set<std::size_t> lengths;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    Generator gen(seed);
    const PatchingPairs pairs = source->patching_pairs(8, gen);
    for (const Row& r : rows(pairs.clean.input)) EXPECT_EQ(std::count(r.begin(), r.end(), kPad), 0);
    lengths.insert(pairs.clean.input.size(1));
  }
  EXPECT_GT(lengths.size(), 2u) << "each set draws its length";
}

// The sources a task's training draws give, from enough draws to see every one of a small task.
std::set<Row> training_sources(const DataSource& source, bool causal) {
  std::set<Row> seen;
  Generator gen(11);
  for (int b = 0; b < 20; ++b)
    for (Row r : rows(source.sample(TaskSplit::train, 500, gen).input)) {
      r.erase(causal ? std::find(r.begin(), r.end(), kSep) : std::find(r.begin(), r.end(), kPad), r.end());
      seen.insert(r);
    }
  return seen;
}

TEST(PatchingPairs, CleanSourcesAreHeldOut) {
  ToyTaskOptions copy, induction, gapped, mqar, zoology;
  copy.name = "copy", copy.length = 3, copy.min_length = 2, copy.symbols = 3;
  induction.name = "induction", induction.length = 3, induction.symbols = 4;
  gapped = induction, gapped.gap = 1;
  mqar.name = "mqar", mqar.pairs = 2, mqar.symbols = 3;
  zoology = mqar, zoology.sequence_length = 8;
  for (ToyTaskOptions* o : {&copy, &induction, &gapped, &mqar, &zoology}) {
    o->held_out_fraction = 0.3;
    const bool causal = o->name != "copy";
    const auto source = source_of(*o, causal ? TaskFormat::causal_lm : TaskFormat::tagging);
    const std::set<Row> train = training_sources(*source, causal);
    SCOPED_TRACE(o->name + " gap " + std::to_string(o->gap) + " sequence_length " + std::to_string(o->sequence_length));
    EXPECT_GT(train.size(), 10u);
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      Generator gen(seed);
      const PatchingPairs pairs = source->patching_pairs(8, gen);
      ASSERT_EQ(pairs.size(), 8u);
      for (Row r : rows(pairs.clean.input)) {
        r.erase(causal ? std::find(r.begin(), r.end(), kSep) : r.end(), r.end());
        EXPECT_EQ(train.count(r), 0u) << "a training source in a patching set";
      }
    }
  }
}

bool same_pairs(const PatchingPairs& a, const PatchingPairs& b) {
  const auto same = [](const Tensor& x, const Tensor& y) {
    return x.defined() == y.defined() && (!x.defined() || (x.shape() == y.shape() && x.to_vector() == y.to_vector()));
  };
  return same(a.clean.input, b.clean.input) && same(a.corrupted.input, b.corrupted.input) && same(a.clean.target, b.clean.target) &&
         same(a.corrupted.target, b.corrupted.target) && same(a.clean.decoder_input, b.clean.decoder_input) &&
         same(a.corrupted.decoder_input, b.corrupted.decoder_input) && a.position == b.position && a.clean_answer == b.clean_answer &&
         a.corrupted_answer == b.corrupted_answer && a.corruption == b.corruption;
}

TEST(PatchingPairs, TheGeneratorDecidesTheSet) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto source = source_of(c.options, c.format);
    Generator a(9), b(9), other(10);
    const PatchingPairs first = source->patching_pairs(8, a);
    EXPECT_TRUE(same_pairs(first, source->patching_pairs(8, b)));
    EXPECT_FALSE(same_pairs(first, source->patching_pairs(8, other)));
  }
}

TEST(PatchingPairs, TasksWithoutAKnownCorruptionHaveNone) {
  ToyTaskOptions majority;
  majority.name = "majority";
  Generator gen(1);
  EXPECT_EQ(source_of(majority, TaskFormat::classification)->patching_pairs(8, gen).size(), 0u);
  ToyTaskOptions copy;
  copy.name = "copy";
  EXPECT_EQ(source_of(copy, TaskFormat::tagging)->patching_pairs(0, gen).size(), 0u);
}

// SCAN: decoded words of a row of ids (specials dropped, up to EOS).
Words words_of(const DataSource& source, const Row& ids, bool target) {
  Words words;
  for (std::int64_t id : ids) {
    if (id == WordVocabulary::kEos || id == kIgnore) break;
    if (id >= WordVocabulary::kFirstWord) words.push_back(target ? source.target_label(id) : source.token_label(id, 0));
  }
  return words;
}

bool primitive(const std::string& word) { return word == "walk" || word == "look" || word == "run" || word == "jump"; }

std::unique_ptr<DataSource> scan_source(ScanSplit split) {
  return make_data_source(task_choice("scan", std::string("{split: ") + enum_name(scan_split_names(), split) + "}"), TaskFormat::seq2seq);
}

// One set: held-out commands of one shape, each with its held-out actions; the corrupted command changes
// the primitive at one word (the same in each) to another primitive, its actions the interpreter's.
void expect_one_primitive_changed(const DataSource& source, const PatchingPairs& pairs, const std::set<ScanPair>& held_out) {
  ASSERT_EQ(pairs.clean.input.shape(), pairs.corrupted.input.shape());
  ASSERT_EQ(pairs.clean.decoder_input.shape(), pairs.corrupted.decoder_input.shape());
  ASSERT_EQ(pairs.clean.target.shape(), pairs.corrupted.target.shape());
  for (const Batch* b : {&pairs.clean, &pairs.corrupted})  // one source and one target length for the set
    EXPECT_FALSE(b->key_padding_mask.defined() || b->decoder_padding_mask.defined());
  const auto clean = rows(pairs.clean.input), corrupted = rows(pairs.corrupted.input);
  const auto clean_target = rows(pairs.clean.target), corrupted_target = rows(pairs.corrupted.target);
  const Words shape = words_of(source, clean[0], false);
  std::set<std::size_t> changed_words;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const Words command = words_of(source, clean[i], false), changed = words_of(source, corrupted[i], false);
    const ScanPair pair{command, words_of(source, clean_target[i], true)};
    EXPECT_EQ(held_out.count(pair), 1u) << join_words(command) << " is no held-out pair";
    ASSERT_EQ(command.size(), shape.size());
    for (std::size_t w = 0; w < shape.size(); ++w) EXPECT_TRUE(command[w] == shape[w] || (primitive(command[w]) && primitive(shape[w])));
    const std::vector<std::size_t> at = differences(clean[i], corrupted[i]);
    ASSERT_EQ(at.size(), 1u) << join_words(command) << " / " << join_words(changed);
    EXPECT_TRUE(primitive(command[at[0]]) && primitive(changed[at[0]])) << join_words(command) << " / " << join_words(changed);
    changed_words.insert(at[0]);
    EXPECT_EQ(words_of(source, corrupted_target[i], true), scan_interpret(changed)) << join_words(changed);
    EXPECT_EQ(first_difference(clean_target[i], corrupted_target[i]), pairs.position[i]);
    EXPECT_EQ(clean_target[i][pairs.position[i]], pairs.clean_answer[i]);
    EXPECT_EQ(corrupted_target[i][pairs.position[i]], pairs.corrupted_answer[i]);
    EXPECT_NE(pairs.clean_answer[i], pairs.corrupted_answer[i]);
    for (std::size_t d : differences(rows(pairs.clean.decoder_input)[i], rows(pairs.corrupted.decoder_input)[i]))
      EXPECT_GT(d, pairs.position[i]) << "the decoder reads the clean actions up to the scored position";
  }
  EXPECT_EQ(changed_words.size(), 1u) << "one word changes in every example of the set";
}

TEST(ScanPatchingPairs, OnePrimitiveChangesInHeldOutCommandsOfOneShape) {
  for (ScanSplit split : {ScanSplit::simple, ScanSplit::length, ScanSplit::addprim_jump}) {
    SCOPED_TRACE(enum_name(scan_split_names(), split));
    const auto source = scan_source(split);
    const std::vector<ScanPair> test = scan_split(split, 0).test;
    const std::set<ScanPair> held_out(test.begin(), test.end());
    std::set<std::string> commands;
    for (std::uint64_t seed = 0; seed < 4; ++seed) {
      Generator gen(seed);
      const PatchingPairs pairs = source->patching_pairs(24, gen);
      ASSERT_EQ(pairs.size(), 24u);
      EXPECT_NE(pairs.corruption.find("changed to another primitive"), std::string::npos) << pairs.corruption;
      expect_one_primitive_changed(*source, pairs, held_out);
      for (const Row& r : rows(pairs.clean.input)) commands.insert(join_words(words_of(*source, r, false)));
    }
    EXPECT_GT(commands.size(), 4u) << "sets hold different commands";
  }
}

TEST(ScanPatchingPairs, TheGeneratorDecidesTheSet) {
  const auto source = scan_source(ScanSplit::simple);
  Generator a(3), b(3), other(4);
  const PatchingPairs first = source->patching_pairs(8, a);
  EXPECT_TRUE(same_pairs(first, source->patching_pairs(8, b)));
  EXPECT_FALSE(same_pairs(first, source->patching_pairs(8, other)));
}

TEST(ScanPatchingPairs, NoneWithoutAHeldOutPrimitive) {
  const std::string dir = ::testing::TempDir() + "attnlab_scan_patching";
  std::filesystem::create_directories(dir);
  write_file_atomically(dir + "/train.txt", "IN: jump OUT: I_JUMP\nIN: walk left OUT: I_TURN_LEFT I_WALK\n");
  write_file_atomically(dir + "/test.txt", "IN: turn left twice OUT: I_TURN_LEFT I_TURN_LEFT\n");
  const ComponentChoice config = task_choice("scan", "{path: " + dir + "/train.txt, test_path: " + dir + "/test.txt}");
  Generator gen(1);
  EXPECT_EQ(make_data_source(config, TaskFormat::seq2seq)->patching_pairs(8, gen).size(), 0u);
  write_file_atomically(dir + "/test.txt", "IN: walk twice OUT: I_WALK I_WALK\n");
  const auto source = make_data_source(config, TaskFormat::seq2seq);
  const PatchingPairs pairs = source->patching_pairs(8, gen);
  ASSERT_EQ(pairs.size(), 8u);  // walk twice becomes jump twice: both primitives are in the vocabularies
  EXPECT_EQ(words_of(*source, rows(pairs.corrupted.input)[0], false), (Words{"jump", "twice"}));
  EXPECT_EQ(words_of(*source, rows(pairs.corrupted.target)[0], true), (Words{"I_JUMP", "I_JUMP"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnlab::data

namespace attnlab::data {
namespace {

// mqar's probe property: every occurrence of a key is labelled with its value, everything else -1.
TEST(TokenProperties, MqarLabelsEachKeyWithItsValue) {
  for (std::size_t sequence_length : {0, 32}) {
    const auto source =
        make_data_source(task_choice("mqar", "{pairs: 4, symbols: 16, sequence_length: " + std::to_string(sequence_length) + "}"), TaskFormat::causal_lm);
    Generator gen(2);
    const Batch b = source->sample(TaskSplit::held_out, 8, gen);
    const auto properties = source->token_properties(b);
    ASSERT_EQ(properties.size(), 1u);
    EXPECT_EQ(properties[0].first, "value_of_key");
    const std::vector<std::int64_t>& value = properties[0].second;
    const std::size_t t = b.input.size(1);
    ASSERT_EQ(value.size(), 8 * t);
    const std::int64_t* ids = b.input.data<std::int64_t>();
    std::size_t labelled = 0;
    for (std::size_t r = 0; r < 8; ++r)
      for (std::size_t i = 0; i < t; ++i) {
        std::int64_t want = -1;
        for (std::size_t p = 0; p < 4; ++p)
          if (ids[r * t + i] == ids[r * t + 2 * p]) want = ids[r * t + 2 * p + 1];
        EXPECT_EQ(value[r * t + i], want) << "row " << r << " position " << i;
        labelled += want >= 0;
      }
    EXPECT_GT(labelled, 8u * 4);  // the pairs' keys at least, and the queried ones
  }
  EXPECT_TRUE(make_data_source(task_choice("reverse"), TaskFormat::tagging)->token_properties(Batch{}).empty());
}

}  // namespace
}  // namespace attnlab::data
