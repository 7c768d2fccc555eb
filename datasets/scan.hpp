// SCAN (Lake and Baroni 2018): commands of a small grammar ("jump around left twice and walk") and the
// action sequences they mean ("I_TURN_LEFT I_JUMP ..."), generated from the grammar and its
// interpretation, with the paper's train/test splits:
//   simple        a random 80/20 split of the 20,910 commands, drawn from `split_seed`
//   length        train on the commands whose action sequence has at most 22 actions, test on the rest
//   addprim_jump  train on every command without "jump" plus the bare "jump" (repeated 1,467 times, as
//                 in the official training file, so that it is seen often enough); test on the other
//                 commands with "jump"
// Or read from SCAN-format files ("IN: <command> OUT: <actions>" per line).
//
// The grammar:
//   C -> S and S | S after S | S            [[x and y]] = [[x]] [[y]];  [[x after y]] = [[y]] [[x]]
//   S -> V twice | V thrice | V             repeated 2 or 3 times
//   V -> D opposite {left,right} | D around {left,right} | D   (D a primitive or "turn")
//   D -> U left | U right | turn left | turn right | U
//   U -> walk | look | run | jump
// where "x left" turns left then does x, "x opposite left" turns left twice then does x, "x around left"
// does (turn left, x) four times, and "turn" alone does nothing beyond its turns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor/enum_names.hpp"

namespace attnlab::data {

using Words = std::vector<std::string>;

struct ScanPair {
  Words command, actions;
  bool operator==(const ScanPair& o) const { return command == o.command && actions == o.actions; }
  bool operator<(const ScanPair& o) const { return command < o.command || (command == o.command && actions < o.actions); }
};

// The action sequence of a command; std::invalid_argument naming the word where it stops parsing.
Words scan_interpret(const Words& command);

// Every command of the grammar with its actions (20,910), in a fixed order.
const std::vector<ScanPair>& scan_commands();

enum class ScanSplit { simple, length, addprim_jump };
const EnumNames<ScanSplit>& scan_split_names();

struct ScanData {
  std::vector<ScanPair> train, test;
};
// The paper's split of the generated commands.
ScanData scan_split(ScanSplit split, std::uint64_t split_seed);

// Pairs from a file of "IN: ... OUT: ..." lines (blank lines skipped); errors name file:line.
std::vector<ScanPair> read_scan_file(const std::string& path);

// Words split at spaces; "" for an empty text.
Words split_words(const std::string& text);
std::string join_words(const Words& words);

// The words of one side: PAD 0, BOS 1, EOS 2, then the words in sorted order.
class WordVocabulary {
 public:
  static constexpr std::int64_t kPad = 0, kBos = 1, kEos = 2, kFirstWord = 3;
  WordVocabulary() = default;
  explicit WordVocabulary(const std::vector<const Words*>& sentences);
  std::size_t size() const { return static_cast<std::size_t>(kFirstWord) + words_.size(); }
  bool contains(const std::string& word) const;
  // Ids of `words`; std::invalid_argument for a word outside the vocabulary ("did you mean").
  std::vector<std::int64_t> encode(const Words& words, const std::string& side) const;
  // The word of an id ("pad", "bos", "eos" for the specials).
  std::string word(std::int64_t id) const;
  // Words of ids up to the first EOS (specials dropped).
  std::string decode(const std::vector<std::int64_t>& ids) const;

 private:
  std::vector<std::string> words_;
};

}  // namespace attnlab::data
