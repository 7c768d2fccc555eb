#include "datasets/char_text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

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
    throw std::runtime_error("cannot read " + source_ +
                             ": " + std::strerror(errno) + "; for the reference corpus (Tiny Shakespeare) run scripts/get_data.sh, which saves it as "
                             "data/tinyshakespeare.txt, or point task.path at any text file");
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

}  // namespace attnlab::data
