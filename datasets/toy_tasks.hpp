// Toy sequence tasks, generated in memory from a seed: copy, reverse, sort (with duplicates),
// multi-query associative recall (Zoology's MQAR), induction heads, and majority. Each example is a
// source sequence and its answer, laid out for a model kind:
//   tagging         (bidirectional encoder, one label per token) input = source, target = answer
//   causal_lm       (decoder) input = source SEP answer[:-1], each position predicting the next token;
//                   only the answer's scored tokens count (the rest are kIgnore); a task may have the
//                   model read other tokens than its answer after SEP (Problem::read)
//   classification  (sequence classifier) input = source, target = one label
//   seq2seq         (encoder-decoder) input = source, decoder_input = SEP answer (SEP serves as BOS),
//                   target = answer EOS, where EOS is the id after the task's symbols (copy, reverse, sort)
// With task.min_length below task.length (copy, reverse, sort) sources vary in length: batches are padded
// to their longest example (PAD in inputs, kIgnore in targets) and carry key padding masks.
// A task whose model never reads its answers (Problem::read, mqar's Zoology layout) tags the causal_lm
// layout itself: a bidirectional model then reads the same tokens as a causal one, and later ones.
// Held-out examples are those whose source hashes into the held-out share; training draws reject them,
// so the two splits never share a source.
//
// Token ids: 0 is PAD, 1 is SEP, task symbols start at 2.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor/batch.hpp"
#include "framework/tensor/enum_names.hpp"
#include "framework/tensor/random.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab::data {

constexpr std::int64_t kPad = 0;
constexpr std::int64_t kSep = 1;
constexpr std::int64_t kFirstSymbol = 2;
constexpr std::int64_t kIgnore = -100;  // targets not scored (cross_entropy's ignore_index)

using attnlab::TaskFormat;  // framework/tensor/batch.hpp: the layouts a task can produce
using attnlab::PatchingPairs;

enum class TaskSplit { train, held_out };

struct SequenceExample {
  std::vector<std::int64_t> input;
  std::vector<std::int64_t> target;  // same length as input (kIgnore where not scored); one label for classification;
                                     // seq2seq: the answer and EOS
  std::vector<std::int64_t> decoder_input;  // seq2seq: SEP (as BOS) and the answer
};

using SequenceBatch = Batch;  // input [B, T], target [B, T] (or [B] for classification), padded (see above)

class SequenceTask {
 public:
  virtual ~SequenceTask() = default;
  virtual std::string name() const = 0;
  // Every token id the task uses, specials included (the seq2seq format adds EOS, id vocab_size()).
  virtual std::size_t vocab_size() const = 0;
  // The seq2seq format's end token, and its vocabulary (source and target share it).
  std::int64_t eos() const { return static_cast<std::int64_t>(vocab_size()); }
  // The number of classes for the classification format (0 when the task has none).
  virtual std::size_t num_classes() const { return 0; }
  virtual std::vector<TaskFormat> formats() const = 0;
  // One source and its answer (answer empty for classification, label instead).
  struct Problem {
    std::vector<std::int64_t> source, answer;
    std::int64_t label = 0;
    std::vector<bool> scored;  // causal_lm: which answer tokens are scored (empty: all)
    // causal_lm: the tokens the model reads after SEP in place of the answer (empty: the answer itself,
    // teacher forcing); for tasks whose answers must stay unseen (mqar's Zoology layout).
    std::vector<std::int64_t> read;
  };
  virtual Problem problem(Generator& gen) const = 0;

  // An example of the split, laid out for `format` (which must be among formats()).
  SequenceExample example(TaskSplit split, TaskFormat format, Generator& gen) const;
  // `size` examples as tensors.
  SequenceBatch batch(TaskSplit split, TaskFormat format, std::size_t size, Generator& gen) const;
  // Clean/corrupted held-out pairs for activation patching (framework/tensor/batch.hpp's PatchingPairs), laid
  // out for `format`: each clean problem corrupted by corrupt(), the set kept to the first example's
  // layout (layout_key). Empty when the task has no corruption (or the format one label per sequence).
  PatchingPairs patching_pairs(TaskFormat format, std::size_t count, Generator& gen) const;
  // Per-token properties for probes (DataSource::token_properties): name -> a label per input token of
  // the format's layout, -1 where undefined. None by default.
  virtual std::vector<std::pair<std::string, std::vector<std::int64_t>>> token_properties(const Tensor& /*input*/, TaskFormat /*format*/) const {
    return {};
  }
  // The longest input of the format (the block size a model needs); seq2seq: the longest source.
  std::size_t max_length(TaskFormat format) const;
  // seq2seq: the longest decoder input (SEP and the answer).
  std::size_t max_target_length() const { return 1 + answer_length(); }
  // Whether examples vary in length (batches are then padded and carry key padding masks).
  virtual bool variable_length() const { return false; }

 protected:
  explicit SequenceTask(double held_out_fraction) : held_out_fraction_(held_out_fraction) {}
  // A corruption of a clean problem for patching: `problem` differs from it in what its answer token
  // `index` depends on, so that token changes; `description` says what was changed.
  struct Corruption {
    Problem problem;
    std::size_t index = 0;
    std::string description;
  };
  // False when the task has none (the default).
  virtual bool corrupt(const Problem& /*clean*/, Generator& /*gen*/, Corruption& /*out*/) const { return false; }
  // What examples of one patching set must share: by default the lengths and where the pads are.
  virtual std::vector<std::int64_t> layout_key(const Problem& p) const;
  // Another problem of `first`'s layout, drawn directly where chance would rarely give one (the default
  // draws any problem, and patching_pairs skips those whose layout_key differs from the first's).
  virtual Problem problem_like(const Problem& /*first*/, Generator& gen) const { return problem(gen); }
  // The longest source and answer.
  virtual std::size_t source_length() const = 0;
  virtual std::size_t answer_length() const = 0;
  // True when the tagging format is the causal_lm layout with every position visible (see above).
  virtual bool tags_causal_layout() const { return false; }

 private:
  bool in_held_out(const std::vector<std::int64_t>& source) const;
  void check_format(TaskFormat format) const;
  // A problem of the split; with `like`, one of its layout (problem_like).
  Problem split_problem(TaskSplit split, Generator& gen, const Problem* like = nullptr) const;
  SequenceExample layout(const Problem& p, TaskFormat format) const;
  // Where answer token `index` is scored in the layout of `format`.
  std::size_t answer_position(const Problem& p, std::size_t index, TaskFormat format) const;
  static SequenceBatch batch_of(std::vector<SequenceExample> examples, TaskFormat format);
  double held_out_fraction_;
};

struct ToyTaskOptions {
  std::string name = "reverse";  // copy | reverse | sort | mqar | induction | majority
  std::size_t length = 8;        // source tokens (copy, reverse, sort, majority); segment length (induction)
  std::size_t min_length = 0;    // copy, reverse, sort: sources of min_length to length tokens; 0: all of `length`
  std::size_t symbols = 10;      // distinct symbols
  std::size_t pairs = 4;         // mqar: key-value pairs
  std::size_t queries = 0;       // mqar: queries (0: one per pair)
  std::size_t gap = 0;           // induction: pad positions around the first segment, which sits at a random offset among them
  std::size_t sequence_length = 0;  // mqar: Zoology's layout of this many input tokens; 0: the compact layout
  bool random_filler = true;         // mqar, Zoology's layout: random symbols between queries (false: PAD)
  double held_out_fraction = 0.1;
};

// Token rows of different lengths as one [B, T] tensor padded with `fill` to the longest, and the mask
// [B, T] (true at padding; undefined when no row is padded).
struct PaddedRows {
  Tensor ids, mask;
};
PaddedRows pad_rows(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t fill);

// Builds a task; errors (OptionError) name the bad option and the valid range.
std::unique_ptr<SequenceTask> make_toy_task(const ToyTaskOptions& options);
// Checks the options of toy task `options.name` the way make_toy_task does, without building it.
void check_toy_task(const ToyTaskOptions& options);
std::vector<std::string> toy_task_names();

// Metrics over logits [B, T, V] (or [B, K]) and targets from a batch: the share of scored tokens
// predicted right, and the share of sequences whose every scored token is right.
struct SequenceMetrics {
  double token_accuracy = 0;
  double exact_match = 0;
  std::size_t scored_tokens = 0;
};
SequenceMetrics sequence_metrics(const Tensor& logits, const Tensor& target);

}  // namespace attnlab::data
