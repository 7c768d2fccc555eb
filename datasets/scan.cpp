// SCAN: the grammar's commands and their interpretation, the paper's splits, SCAN-format files, and the
// `scan` task (see scan.hpp).
#include "datasets/scan.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>

#include "datasets/source.hpp"
#include "datasets/toy_tasks.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/text.hpp"
#include "framework/tensor/registry.hpp"

namespace attnlab::data {
namespace {

const std::vector<std::string> kPrimitives{"walk", "look", "run", "jump"};
const std::vector<std::string> kDirections{"left", "right"};
// The official training file of the addprim_jump split holds the bare "jump" this many times.
constexpr std::size_t kJumpRepeats = 1467;

[[noreturn]] void bad(const Words& command, std::size_t at, const std::string& why) {
  throw std::invalid_argument("'" + join_words(command) + "' is not a SCAN command: " + why +
                              (at < command.size() ? " at '" + command[at] + "' (word " + std::to_string(at + 1) + ")" : ""));
}

std::string turn_action(const std::string& direction) { return direction == "left" ? "I_TURN_LEFT" : "I_TURN_RIGHT"; }

bool is_primitive(const std::string& word) { return std::find(kPrimitives.begin(), kPrimitives.end(), word) != kPrimitives.end(); }

// V: "x", "x dir", "x opposite dir", "x around dir" over words [begin, end) of `command`.
void interpret_verb(const Words& command, std::size_t begin, std::size_t end, Words& out) {
  if (begin == end) bad(command, begin, "a verb is missing");
  const std::string& x = command[begin];
  const bool primitive = is_primitive(x);
  if (!primitive && x != "turn") bad(command, begin, "expected walk, look, run, jump or turn");
  const auto act = [&](Words& o) {
    if (primitive) o.push_back("I_" + std::string(x == "walk" ? "WALK" : x == "look" ? "LOOK" : x == "run" ? "RUN" : "JUMP"));
  };
  const std::size_t n = end - begin;
  const auto direction = [&](std::size_t i) {
    const std::string& d = command[begin + i];
    if (d != "left" && d != "right") bad(command, begin + i, "expected left or right");
    return turn_action(d);
  };
  if (n == 1) {
    if (!primitive) bad(command, begin, "'turn' needs a direction");
    act(out);
  } else if (n == 2) {
    out.push_back(direction(1));
    act(out);
  } else if (n == 3 && command[begin + 1] == "opposite") {
    const std::string turn = direction(2);
    out.insert(out.end(), {turn, turn});
    act(out);
  } else if (n == 3 && command[begin + 1] == "around") {
    const std::string turn = direction(2);
    for (int i = 0; i < 4; ++i) {
      out.push_back(turn);
      act(out);
    }
  } else {
    bad(command, begin + 1, "expected left, right, opposite or around");
  }
}

// S: V, "V twice", "V thrice".
void interpret_sentence(const Words& command, std::size_t begin, std::size_t end, Words& out) {
  if (begin == end) bad(command, begin, "a part is empty");
  std::size_t repeats = 1;
  if (command[end - 1] == "twice") repeats = 2;
  if (command[end - 1] == "thrice") repeats = 3;
  Words once;
  interpret_verb(command, begin, repeats > 1 ? end - 1 : end, once);
  for (std::size_t r = 0; r < repeats; ++r) out.insert(out.end(), once.begin(), once.end());
}

std::vector<ScanPair> generate() {
  std::vector<Words> verbs;
  for (const auto& u : kPrimitives) verbs.push_back({u});
  for (const char* x : {"walk", "look", "run", "jump", "turn"})
    for (const auto& d : kDirections) {
      verbs.push_back({x, d});
      verbs.push_back({x, "opposite", d});
      verbs.push_back({x, "around", d});
    }
  std::vector<Words> sentences;
  for (const Words& v : verbs) {
    sentences.push_back(v);
    for (const char* times : {"twice", "thrice"}) {
      sentences.push_back(v);
      sentences.back().push_back(times);
    }
  }
  std::vector<ScanPair> pairs;
  const auto add = [&](Words command) {
    ScanPair p;
    p.actions = scan_interpret(command);
    p.command = std::move(command);
    pairs.push_back(std::move(p));
  };
  for (const Words& s : sentences) add(s);
  for (const char* conjunction : {"and", "after"})
    for (const Words& a : sentences)
      for (const Words& b : sentences) {
        Words c = a;
        c.push_back(conjunction);
        c.insert(c.end(), b.begin(), b.end());
        add(std::move(c));
      }
  return pairs;
}

bool mentions(const Words& command, const std::string& word) { return std::find(command.begin(), command.end(), word) != command.end(); }

// Where a command's primitives are (word indices).
std::vector<std::size_t> primitive_words(const Words& command) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < command.size(); ++i)
    if (is_primitive(command[i])) at.push_back(i);
  return at;
}

// Whether two commands differ at most in which primitive each primitive word is. They then have as many
// actions, at the same places: a primitive does one action wherever it stands (and "turn" is no
// primitive: it does none of its own).
bool same_shape(const Words& a, const Words& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && !(is_primitive(a[i]) && is_primitive(b[i]))) return false;
  return true;
}

// The pair's command is the grammar's and its actions are the interpretation (files may hold others).
bool interpreted(const ScanPair& p) {
  try {
    return scan_interpret(p.command) == p.actions;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

}  // namespace

Words split_words(const std::string& text) {
  Words words;
  std::string word;
  for (char ch : text + " ") {
    if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += ch;
    }
  }
  return words;
}

std::string join_words(const Words& words) {
  std::string text;
  for (const auto& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

Words scan_interpret(const Words& command) {
  if (command.empty()) throw std::invalid_argument("an empty text is not a SCAN command");
  Words out;
  const auto conjunction = std::find_if(command.begin(), command.end(), [](const std::string& w) { return w == "and" || w == "after"; });
  const std::size_t split = static_cast<std::size_t>(conjunction - command.begin());
  if (split == command.size()) {
    interpret_sentence(command, 0, command.size(), out);
    return out;
  }
  Words first, second;
  interpret_sentence(command, 0, split, first);
  interpret_sentence(command, split + 1, command.size(), second);
  if (*conjunction == "after") std::swap(first, second);
  out = first;
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

const std::vector<ScanPair>& scan_commands() {
  static const std::vector<ScanPair> pairs = generate();
  return pairs;
}

const EnumNames<ScanSplit>& scan_split_names() {
  static const EnumNames<ScanSplit> names{
      {"simple", ScanSplit::simple}, {"length", ScanSplit::length}, {"addprim_jump", ScanSplit::addprim_jump}};
  return names;
}

ScanData scan_split(ScanSplit split, std::uint64_t split_seed) {
  const std::vector<ScanPair>& all = scan_commands();
  ScanData d;
  if (split == ScanSplit::simple) {
    std::vector<ScanPair> shuffled = all;
    Generator gen(split_seed);
    for (std::size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[gen.next_below(i)]);
    const std::size_t train = shuffled.size() * 4 / 5;  // 16,728 of 20,910, as the official files
    d.train.assign(shuffled.begin(), shuffled.begin() + static_cast<std::ptrdiff_t>(train));
    d.test.assign(shuffled.begin() + static_cast<std::ptrdiff_t>(train), shuffled.end());
  } else if (split == ScanSplit::length) {
    for (const ScanPair& p : all) (p.actions.size() <= 22 ? d.train : d.test).push_back(p);
  } else {
    const Words jump{"jump"};
    for (const ScanPair& p : all) {
      if (p.command == jump) {
        for (std::size_t r = 0; r < kJumpRepeats; ++r) d.train.push_back(p);
      } else {
        (mentions(p.command, "jump") ? d.test : d.train).push_back(p);
      }
    }
  }
  return d;
}

namespace {

// One line of a SCAN file: exactly one IN: (first) and one OUT:, text that is UTF-8 without control
// characters; errors say file:line and, for bytes, the column.
ScanPair read_scan_line(const std::string& line, const std::string& where) {
  if (const std::string problem = text_problem(line); !problem.empty()) throw std::invalid_argument(where + problem + ": '" + printable(line) + "'");
  const Words words = split_words(line);
  const auto count = [&](const char* marker) { return std::count(words.begin(), words.end(), marker); };
  if (words[0] != "IN:" || count("IN:") != 1 || count("OUT:") != 1) {
    throw std::invalid_argument(where + "expected 'IN: <command> OUT: <actions>' (one IN: first, one OUT:), got '" + printable(line) + "'");
  }
  const auto out = std::find(words.begin(), words.end(), "OUT:");
  ScanPair p;
  p.command.assign(words.begin() + 1, out);
  p.actions.assign(out + 1, words.end());
  if (p.command.empty() || p.actions.empty()) throw std::invalid_argument(where + "the command or the actions are empty");
  return p;
}

}  // namespace

std::vector<ScanPair> read_scan_file(const std::string& path) {
  const std::string text = without_bom(read_file(path, "SCAN file"));  // a byte-order mark some editors write
  std::vector<ScanPair> pairs;
  std::size_t line_number = 0, start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (split_words(line).empty() && text_problem(line).empty()) continue;
    pairs.push_back(read_scan_line(line, path + ":" + std::to_string(line_number) + ": "));
  }
  if (pairs.empty()) throw std::invalid_argument(path + ": no 'IN: ... OUT: ...' lines");
  return pairs;
}

WordVocabulary::WordVocabulary(const std::vector<const Words*>& sentences) {
  std::set<std::string> words;
  for (const Words* s : sentences) words.insert(s->begin(), s->end());
  words_.assign(words.begin(), words.end());
}

bool WordVocabulary::contains(const std::string& word) const { return std::binary_search(words_.begin(), words_.end(), word); }

std::vector<std::int64_t> WordVocabulary::encode(const Words& words, const std::string& side) const {
  std::vector<std::int64_t> ids;
  for (const std::string& w : words) {
    const auto it = std::lower_bound(words_.begin(), words_.end(), w);
    if (it == words_.end() || *it != w) {
      const std::string guess = nearest(w, words_);
      throw std::invalid_argument("'" + w + "' is not a word of the " + side + " vocabulary" +
                                  (guess.empty() ? "" : "; did you mean '" + guess + "'?") + " (it has " + join_words(words_) + ")");
    }
    ids.push_back(kFirstWord + (it - words_.begin()));
  }
  return ids;
}

std::string WordVocabulary::word(std::int64_t id) const {
  if (id == kPad) return "pad";
  if (id == kBos) return "bos";
  if (id == kEos) return "eos";
  const std::size_t i = static_cast<std::size_t>(id - kFirstWord);
  return id >= kFirstWord && i < words_.size() ? words_[i] : "?" + std::to_string(id);
}

std::string WordVocabulary::decode(const std::vector<std::int64_t>& ids) const {
  Words words;
  for (std::int64_t id : ids) {
    if (id == kEos) break;
    if (id >= kFirstWord) words.push_back(word(id));
  }
  return join_words(words);
}

namespace {

// The scan task: the pairs of a split (or of files), encoded once, sampled with replacement for training
// and walked in order for evaluation.
class ScanSource : public DataSource {
 public:
  explicit ScanSource(ScanData data, bool from_files = false) : data_(std::move(data)), from_files_(from_files) {
    std::vector<const Words*> commands, actions;
    for (const auto* split : {&data_.train, &data_.test})
      for (const ScanPair& p : *split) commands.push_back(&p.command), actions.push_back(&p.actions);
    source_ = WordVocabulary(commands);
    target_ = WordVocabulary(actions);
    for (const auto* split : {&data_.train, &data_.test}) {
      auto& encoded = split == &data_.train ? train_ : test_;
      for (const ScanPair& p : *split) encoded.push_back({source_.encode(p.command, "command"), target_.encode(p.actions, "action")});
    }
  }
  DataShape shape() const override {
    DataShape s;
    s.vocab_size = source_.size();
    s.num_classes = target_.size();
    for (const auto* split : {&train_, &test_})
      for (const Encoded& e : *split) {
        s.max_len = std::max(s.max_len, e.command.size());
        s.target_max_len = std::max(s.target_max_len, e.actions.size() + 1);
      }
    s.padded = true;
    s.bos = WordVocabulary::kBos;
    s.eos = WordVocabulary::kEos;
    return s;
  }
  Batch sample(TaskSplit split, std::size_t size, Generator& gen) const override {
    const auto& pairs = split == TaskSplit::train ? train_ : test_;
    std::vector<const Encoded*> chosen;
    for (std::size_t i = 0; i < size; ++i) chosen.push_back(&pairs[gen.next_below(pairs.size())]);
    return batch_of(chosen);
  }
  std::size_t held_out_batches(std::size_t size) const override { return (test_.size() + size - 1) / size; }
  Batch held_out_batch(std::size_t index, std::size_t size) const override {
    std::vector<const Encoded*> chosen;
    for (std::size_t i = index * size; i < std::min(test_.size(), (index + 1) * size); ++i) chosen.push_back(&test_[i]);
    return batch_of(chosen);
  }
  std::string token_label(std::int64_t id, std::size_t) const override { return source_.word(id); }
  std::string target_label(std::int64_t id) const override { return target_.word(id); }
  bool is_padding(std::int64_t id) const override { return id == WordVocabulary::kPad; }
  std::string decode_target(const std::vector<std::int64_t>& ids) const override { return target_.decode(ids); }
  // Pairs read from files are hashed (once, in order); generated ones come from the config alone.
  std::string fingerprint() const override {
    if (!from_files_) return "";
    std::call_once(fingerprinted_, [this] {
      Fnv1a hash;
      for (const auto* split : {&data_.train, &data_.test})
        for (const ScanPair& p : *split) hash.add(p.command), hash.add(p.actions);
      fingerprint_ = "fnv1a64 " + hash.hex() + " of " + std::to_string(data_.train.size() + data_.test.size()) + " pairs";
    });
    return fingerprint_;
  }
  // One held-out command drawn as the template, and `count` held-out commands of its shape drawn with
  // replacement (the template with its primitives reassigned, as the held-out split has them: the same
  // other words, so the same source and target lengths). Each is corrupted by changing its primitive at
  // one word, the same for the set, to another primitive, and scored at the first action that changes.
  // Empty when no held-out command has a primitive.
  PatchingPairs patching_pairs(std::size_t count, Generator& gen) const override {
    const std::vector<const ScanPair*> variants = patching_variants(gen);
    const std::vector<std::string> primitives = known_primitives();
    if (count == 0 || variants.empty() || primitives.size() < 2) return {};
    const std::vector<std::size_t> slots = primitive_words(variants[0]->command);
    const std::size_t word = slots[gen.next_below(slots.size())];
    std::vector<Encoded> clean, corrupted;
    PatchingPairs pairs;
    for (std::size_t i = 0; i < count; ++i) {
      const ScanPair& c = *variants[gen.next_below(variants.size())];
      ScanPair x = c;
      std::vector<std::string> others;
      for (const std::string& u : primitives)
        if (u != c.command[word]) others.push_back(u);
      x.command[word] = others[gen.next_below(others.size())];
      x.actions = scan_interpret(x.command);
      clean.push_back(encoded(c));
      corrupted.push_back(encoded(x));
      std::size_t at = 0;
      while (c.actions[at] == x.actions[at]) ++at;  // the changed primitive's action differs somewhere
      pairs.position.push_back(at);
      pairs.clean_answer.push_back(clean.back().actions[at]);
      pairs.corrupted_answer.push_back(corrupted.back().actions[at]);
    }
    pairs.clean = batch_of(pointers(clean));
    pairs.corrupted = batch_of(pointers(corrupted));
    Words shape = variants[0]->command;
    for (std::size_t s : slots) shape[s] = "U";
    pairs.corruption = "the primitive at word " + std::to_string(word + 1) + " of commands shaped '" + join_words(shape) +
                       "' (U a primitive) changed to another primitive";
    return pairs;
  }

 private:
  struct Encoded {
    std::vector<std::int64_t> command, actions;
  };
  Encoded encoded(const ScanPair& p) const { return {source_.encode(p.command, "command"), target_.encode(p.actions, "action")}; }
  static std::vector<const Encoded*> pointers(const std::vector<Encoded>& encoded) {
    std::vector<const Encoded*> out;
    for (const Encoded& e : encoded) out.push_back(&e);
    return out;
  }
  // The template, drawn from the held-out commands that have a primitive, first; then every held-out
  // command of its shape.
  std::vector<const ScanPair*> patching_variants(Generator& gen) const {
    std::vector<const ScanPair*> candidates;
    for (const ScanPair& p : data_.test)
      if (!primitive_words(p.command).empty() && interpreted(p)) candidates.push_back(&p);
    if (candidates.empty()) return {};
    std::vector<const ScanPair*> variants{candidates[gen.next_below(candidates.size())]};
    for (const ScanPair* p : candidates)
      if (p != variants[0] && same_shape(p->command, variants[0]->command)) variants.push_back(p);
    return variants;
  }
  // The primitives both vocabularies hold (a corrupted command must be encodable).
  std::vector<std::string> known_primitives() const {
    std::vector<std::string> known;
    for (const std::string& u : kPrimitives)
      if (source_.contains(u) && target_.contains(scan_interpret({u})[0])) known.push_back(u);
    return known;
  }
  static Batch batch_of(const std::vector<const Encoded*>& chosen) {
    std::vector<std::vector<std::int64_t>> commands, inputs, targets;
    for (const Encoded* e : chosen) {
      commands.push_back(e->command);
      inputs.push_back(e->actions);
      inputs.back().insert(inputs.back().begin(), WordVocabulary::kBos);
      targets.push_back(e->actions);
      targets.back().push_back(WordVocabulary::kEos);
    }
    Batch b;
    const PaddedRows source = pad_rows(commands, WordVocabulary::kPad), decoder = pad_rows(inputs, WordVocabulary::kPad);
    b.input = source.ids;
    b.key_padding_mask = source.mask;
    b.decoder_input = decoder.ids;
    b.decoder_padding_mask = decoder.mask;
    b.target = pad_rows(targets, kIgnore).ids;
    return b;
  }
  ScanData data_;
  bool from_files_ = false;
  WordVocabulary source_, target_;
  std::vector<Encoded> train_, test_;
  mutable std::once_flag fingerprinted_;
  mutable std::string fingerprint_;
 protected:
  std::vector<std::int64_t> source_ids(const std::string& text) const override { return source_.encode(split_words(text), "command"); }
};

// The scan task: SCAN's pairs, generated with one of the paper's splits or read from SCAN-format files.
class ScanTask {
 public:
  static constexpr const char* kName = "scan";
  static constexpr const char* kDescription =
      "SCAN commands to action sequences (Lake and Baroni 2018), generated from its grammar with the paper's splits, or read from "
      "SCAN-format files";
  static constexpr bool kHeldOutSplit = true;
  struct Options {
    ScanSplit split = ScanSplit::simple;
    std::uint64_t split_seed = 0;
    std::string path, test_path;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.choice("split", &Options::split, scan_split_names(),
             "`simple` (random 80/20 of the 20,910 commands), `length` (train on action sequences of at most 22 actions, test on "
             "longer ones), `addprim_jump` (train without \"jump\" but for the bare command, test on the rest with it)");
    s.field("split_seed", &Options::split_seed,
            "the shuffle of the simple split, fixed apart from `seed` so that every run of a comparison sees one split");
    s.field("path", &Options::path, "a SCAN-format file (`IN: <command> OUT: <actions>` lines) of training pairs, empty to generate the commands");
    s.field("test_path", &Options::test_path, "the held-out pairs, a SCAN-format file, with `path` for the training pairs");
    return s;
  }
  static void check(const Options& o, const ConfigNode& node) {
    if (o.path.empty() != o.test_path.empty()) {
      node.fail(o.path.empty() ? "test_path" : "path",
                "task.path (training pairs) and task.test_path (held-out pairs) are SCAN-format files given together; set both, or "
                "neither to generate the commands");
    }
    if (!o.path.empty() && o.split != ScanSplit::simple) {
      node.fail("split", "task.split chooses a split of the generated commands; with task.path the files are the split");
    }
  }
  static std::vector<TaskFormat> layouts(const Options&) { return {TaskFormat::seq2seq}; }
  // The shape needs the vocabularies and lengths: generating the commands takes milliseconds, and files
  // of pairs are small.
  static DataShape data_shape(const Options& o, TaskFormat) { return ScanSource(data(o)).shape(); }
  static std::unique_ptr<DataSource> source(const Options& o, TaskFormat) { return std::make_unique<ScanSource>(data(o), !o.path.empty()); }

 private:
  static ScanData data(const Options& o) {
    if (o.path.empty()) return scan_split(o.split, o.split_seed);
    return ScanData{read_scan_file(o.path), read_scan_file(o.test_path)};
  }
};
ATTNLAB_REGISTER_TASK(ScanTask);

}  // namespace
}  // namespace attnlab::data
