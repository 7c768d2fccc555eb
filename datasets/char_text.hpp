// Character-level text (nanoGPT's shakespeare_char): a vocabulary of the characters that occur in the
// file (sorted by byte value), the text encoded as ids, a train / validation split by position (the
// first 90% trains, the rest validates, so the two never overlap), and batches of random windows of
// block_size + 1 characters drawn from a seeded generator.
//
// Legend: B batch, T block size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor/random.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab::data {

class CharVocabulary {
 public:
  CharVocabulary() = default;
  // The distinct bytes of `text`, sorted.
  static CharVocabulary from_text(const std::string& text);
  // The characters in id order (stored in a run so that sampling can decode).
  static CharVocabulary from_chars(const std::string& chars);
  std::size_t size() const { return chars_.size(); }
  const std::string& chars() const { return chars_; }
  // Errors name the first character that is not in the vocabulary.
  std::vector<std::int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::int64_t>& ids) const;

 private:
  std::string chars_;
  std::int16_t index_[256] = {};  // byte -> id + 1 (0: not in the vocabulary)
};

enum class Split { train, validation };

struct TokenBatch {
  Tensor input;   // [B, T] int64
  Tensor target;  // [B, T] int64: the input shifted left by one
};

class CharTextDataset {
 public:
  // Reads `path`; train_fraction of the text (by position) trains, the rest validates. Errors name the
  // file: missing or unreadable (saying how to get the reference text), a folder, or empty.
  CharTextDataset(const std::string& path, double train_fraction = 0.9);
  // The same, and refuses now (not at the first batch) a text whose training or validation split is
  // shorter than one window of block_size characters and its target (see check_block_size).
  CharTextDataset(const std::string& path, double train_fraction, std::size_t block_size);
  // From text in memory (tests, and text the caller already has).
  static CharTextDataset from_text(const std::string& text, double train_fraction = 0.9);

  // Throws std::invalid_argument unless both splits hold at least block_size + 1 characters, naming the
  // file, the split and the fix.
  void check_block_size(std::size_t block_size) const;

  const CharVocabulary& vocabulary() const { return vocabulary_; }
  // A hash of the characters and both splits' ids (DataSource::fingerprint).
  std::string fingerprint() const;
  std::size_t size(Split split) const { return split == Split::train ? train_.size() : validation_.size(); }
  // batch_size random windows of block_size inputs and the next character of each as targets.
  TokenBatch batch(Split split, std::size_t batch_size, std::size_t block_size, Generator& gen) const;
  // `rows` consecutive windows of `length` inputs, window r starting at position start + r * length of
  // the split, with the next characters as targets; evaluation walks the whole split with these. The last
  // window's target must lie inside the split: start + rows * length < size(split).
  TokenBatch windows(Split split, std::size_t start, std::size_t rows, std::size_t length) const;

 private:
  CharTextDataset() = default;
  void build(const std::string& text, double train_fraction);
  void check_split(Split split, std::size_t block_size) const;
  std::string source_ = "the text";  // "the text file '<path>'" when read from a file, for messages
  CharVocabulary vocabulary_;
  std::vector<std::int64_t> train_, validation_;
};

}  // namespace attnlab::data
