// Character-level text (char_text.hpp), and the char_text task that trains on it.
#include "datasets/char_text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "datasets/source.hpp"
#include "framework/io/atomic_file.hpp"

namespace attnlab::data {

namespace fs = std::filesystem;

CharVocabulary CharVocabulary::from_text(const std::string& text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  std::string chars;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) chars.push_back(static_cast<char>(c));
  return from_chars(chars);
}

CharVocabulary CharVocabulary::from_chars(const std::string& chars) {
  CharVocabulary v;
  v.chars_ = chars;
  for (std::size_t i = 0; i < chars.size(); ++i) {
    const auto byte = static_cast<unsigned char>(chars[i]);
    if (v.index_[byte]) throw std::invalid_argument("vocabulary: the character with byte value " + std::to_string(byte) + " appears twice");
    v.index_[byte] = static_cast<std::int16_t>(i + 1);
  }
  return v;
}

std::vector<std::int64_t> CharVocabulary::encode(const std::string& text) const {
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (!index_[byte]) {
      throw std::invalid_argument("the character with byte value " + std::to_string(byte) + " at position " + std::to_string(i) +
                                  " is not in the vocabulary of " + std::to_string(size()) + " characters");
    }
    ids.push_back(index_[byte] - 1);
  }
  return ids;
}

std::string CharVocabulary::decode(const std::vector<std::int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (std::int64_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= size()) {
      throw std::invalid_argument("id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(size()) + " characters");
    }
    text.push_back(chars_[static_cast<std::size_t>(id)]);
  }
  return text;
}

CharTextDataset::CharTextDataset(const std::string& path, double train_fraction) : source_("the text file '" + path + "'") {
  if (fs::is_directory(path)) {
    throw std::runtime_error(source_ + " is a folder; point task.path at a text file (for Tiny Shakespeare, "
                                       "scripts/get_data.sh saves data/tinyshakespeare.txt)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message = "cannot read " + source_ + ": " + std::strerror(error) +
                                "; for the reference corpus (Tiny Shakespeare) run scripts/get_data.sh, which saves it as "
                                "data/tinyshakespeare.txt, or point task.path at any text file";
    if (error == ENOENT || error == ENOTDIR) throw FileMissing(message);
    throw std::runtime_error(message);
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + source_ + ": " + std::strerror(errno));
  build(text.str(), train_fraction);
}

CharTextDataset::CharTextDataset(const std::string& path, double train_fraction, std::size_t block_size)
    : CharTextDataset(path, train_fraction) {
  check_block_size(block_size);
}

CharTextDataset CharTextDataset::from_text(const std::string& text, double train_fraction) {
  CharTextDataset d;
  d.build(text, train_fraction);
  return d;
}

void CharTextDataset::build(const std::string& text, double train_fraction) {
  if (!(train_fraction > 0.0 && train_fraction < 1.0)) {
    throw std::invalid_argument(source_ + ": train_fraction must be in (0, 1), got " + std::to_string(train_fraction));
  }
  if (text.empty()) throw std::invalid_argument(source_ + " is empty; point task.path at a file with some text");
  vocabulary_ = CharVocabulary::from_text(text);
  const std::vector<std::int64_t> ids = vocabulary_.encode(text);
  const auto cut = static_cast<std::size_t>(static_cast<double>(ids.size()) * train_fraction);
  train_.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut));
  validation_.assign(ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end());
}

std::string CharTextDataset::fingerprint() const {
  Fnv1a hash;
  const std::string chars = vocabulary_.chars();
  hash.add(chars.data(), chars.size());
  hash.add(train_);
  hash.add(validation_);
  return "fnv1a64 " + hash.hex() + " of " + std::to_string(train_.size() + validation_.size()) + " characters";
}

void CharTextDataset::check_block_size(std::size_t block_size) const {
  check_split(Split::train, block_size);
  check_split(Split::validation, block_size);
}

void CharTextDataset::check_split(Split split, std::size_t block_size) const {
  const std::size_t have = size(split), total = train_.size() + validation_.size();
  if (have >= block_size + 1) return;
  const bool train = split == Split::train;
  throw std::invalid_argument(source_ + " has " + std::to_string(total) + " characters: its " + (train ? "training" : "validation") +
                              " split (" + std::to_string(have) + ") is shorter than block_size + 1 (" + std::to_string(block_size + 1) +
                              "); use a smaller task.block_size or more text" +
                              (train ? "" : ", or a smaller task.train_fraction (the validation split is the rest)"));
}

TokenBatch CharTextDataset::batch(Split split, std::size_t batch_size, std::size_t block_size, Generator& gen) const {
  check_split(split, block_size);
  const std::vector<std::int64_t>& ids = split == Split::train ? train_ : validation_;
  std::vector<std::int64_t> input(batch_size * block_size), target(batch_size * block_size);
  for (std::size_t b = 0; b < batch_size; ++b) {
    const std::size_t start = gen.next_below(ids.size() - block_size);
    std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(start), block_size, input.begin() + static_cast<std::ptrdiff_t>(b * block_size));
    std::copy_n(ids.begin() + static_cast<std::ptrdiff_t>(start + 1), block_size, target.begin() + static_cast<std::ptrdiff_t>(b * block_size));
  }
  return {from_indices(input, {batch_size, block_size}), from_indices(target, {batch_size, block_size})};
}

TokenBatch CharTextDataset::windows(Split split, std::size_t start, std::size_t rows, std::size_t length) const {
  const std::vector<std::int64_t>& ids = split == Split::train ? train_ : validation_;
  if (rows == 0 || length == 0 || start + rows * length >= ids.size()) {
    throw std::invalid_argument(source_ + ": " + std::to_string(rows) + " windows of " + std::to_string(length) + " from position " +
                                std::to_string(start) + " need targets beyond the split's " + std::to_string(ids.size()) +
                                " characters");
  }
  const auto first = ids.begin() + static_cast<std::ptrdiff_t>(start);
  const auto n = static_cast<std::ptrdiff_t>(rows * length);
  return {from_indices(std::vector<std::int64_t>(first, first + n), {rows, length}),
          from_indices(std::vector<std::int64_t>(first + 1, first + 1 + n), {rows, length})};
}


// ---- the task ----

namespace {

class CharTextSource : public DataSource {
 public:
  CharTextSource(const std::string& path, double train_fraction, std::size_t block_size)
      : text_(path, train_fraction, block_size), block_size_(block_size) {}
  DataShape shape() const override {
    DataShape s;
    s.vocab_size = s.num_classes = text_.vocabulary().size();
    s.max_len = block_size_;
    return s;
  }
  Batch sample(TaskSplit split, std::size_t size, Generator& gen) const override {
    const TokenBatch b = text_.batch(split == TaskSplit::held_out ? Split::validation : Split::train, size, block_size_, gen);
    return {b.input, b.target, Tensor()};
  }
  // Consecutive windows of block_size, the remainder as one shorter window, so that every character
  // after the split's first is predicted once.
  std::size_t held_out_batches(std::size_t size) const override {
    return (full_windows() + size - 1) / size + (tail() ? 1 : 0);
  }
  Batch held_out_batch(std::size_t index, std::size_t size) const override {
    const std::size_t full = full_windows(), first = index * size;
    const TokenBatch b = first < full ? text_.windows(Split::validation, first * block_size_, std::min(size, full - first), block_size_)
                                      : text_.windows(Split::validation, full * block_size_, 1, tail());
    return {b.input, b.target, Tensor()};
  }
  // The vocabulary is the text's bytes: one byte of a character written in several (UTF-8's é is C3 A9)
  // and a control character are labelled \xC3, so that every label is text a report or Python can hold.
  std::string token_label(std::int64_t id, std::size_t) const override {
    const char ch = text_.vocabulary().chars().at(static_cast<std::size_t>(id));
    if (ch == ' ') return "\u2423";
    if (ch == '\n') return "\\n";
    if (ch == '\t') return "\\t";
    const auto byte = static_cast<unsigned char>(ch);
    if (byte < 0x20 || byte >= 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", byte);
      return escaped;
    }
    return std::string(1, ch);
  }
  std::string vocabulary() const override { return text_.vocabulary().chars(); }
  std::string fingerprint() const override {  // hashed once: the text does not change, and a run saves often
    std::call_once(fingerprinted_, [this] { fingerprint_ = text_.fingerprint(); });
    return fingerprint_;
  }

 private:
  std::size_t full_windows() const { return (text_.size(Split::validation) - 1) / block_size_; }
  std::size_t tail() const { return (text_.size(Split::validation) - 1) % block_size_; }
  CharTextDataset text_;
  std::size_t block_size_;
  mutable std::once_flag fingerprinted_;
  mutable std::string fingerprint_;
};


// The char_text task: character-level text from a file (nanoGPT's shakespeare_char).
class CharTextTask {
 public:
  static constexpr const char* kName = "char_text";
  static constexpr const char* kDescription = "character-level text from a file (Tiny Shakespeare: scripts/get_data.sh); its tokens are the text's bytes, so a character "
    "UTF-8 writes in several bytes (é) is several tokens, each named \\xNN";
  static constexpr bool kHeldOutSplit = true;
  struct Options {
    std::string path;              // the text file
    std::size_t block_size = 64;   // characters per training window
    double train_fraction = 0.9;   // the leading share that trains
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("path", &Options::path, "the text file (`scripts/get_data.sh` fetches Tiny Shakespeare)");
    s.field("block_size", &Options::block_size, "characters per training window", Range::at_least(1));
    s.field("train_fraction", &Options::train_fraction, "the leading share of the text that trains; the rest validates", Range::open(0.0, 1.0));
    return s;
  }
  static void check(const Options& o, const ConfigNode& node) {
    if (o.path.empty()) node.fail("path", "task.path is required for char_text: the text file to train on");
  }
  static std::vector<TaskFormat> layouts(const Options&) { return {TaskFormat::causal_lm}; }
  static DataShape data_shape(const Options& o, TaskFormat) {
    DataShape s;
    s.vocab_size = s.num_classes = 256;  // at most one id per byte value; the file says how many
    s.max_len = o.block_size;
    return s;
  }
  static std::unique_ptr<DataSource> source(const Options& o, TaskFormat) {
    return std::make_unique<CharTextSource>(o.path, o.train_fraction, o.block_size);
  }
};
ATTNLAB_REGISTER_TASK(CharTextTask);

}  // namespace

}  // namespace attnlab::data
