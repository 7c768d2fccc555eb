// Toy sequence tasks, generated in memory from a seed, one file each in datasets/tasks/: copy, reverse,
// sort (with duplicates), multi-query associative recall (Zoology's MQAR), induction heads, and majority.
// Each example is a source sequence and its answer, laid out for a model kind:
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

#include "datasets/source.hpp"
#include "framework/tensor/enum_names.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab::data {

constexpr std::int64_t kPad = 0;
constexpr std::int64_t kSep = 1;
constexpr std::int64_t kFirstSymbol = 2;

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
  // Draws a problem of each split (from a generator of its own): a task whose options leave one split
  // without sources fails when its source is made, before a run folder exists, not at a later batch.
  void check_splits() const;
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
  // n random symbols (ids kFirstSymbol ... kFirstSymbol + symbols - 1), drawn from `gen`.
  static std::vector<std::int64_t> random_symbols(std::size_t n, std::size_t symbols, Generator& gen);
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

// The options every toy task reads besides its own, and their checks (toy_fields adds them to a schema).
struct ToyOptions {
  std::size_t symbols = 10;        // distinct symbols
  double held_out_fraction = 0.1;  // share of sources kept for evaluation
};
template <class O>
void toy_fields(Schema<O>& s, const char* symbols_doc = "distinct symbols") {
  std::size_t O::*symbols = &O::symbols;  // members of ToyOptions, as members of O
  double O::*held_out = &O::held_out_fraction;
  s.field("symbols", symbols, symbols_doc, Range::at_least(2));
  s.field("held_out_fraction", held_out, "share of sources kept for evaluation; training never sees them", Range::open(0.0, 1.0));
}

// What the task registry asks of a task (source.hpp: layouts, data_shape, source), for a toy task T
// built from its Options: T derives from SequenceTask and from this, and needs no more.
template <class T>
struct ToyTaskRegistration {
  template <class O>
  static std::vector<TaskFormat> layouts(const O& options) {
    return T(options).formats();
  }
  template <class O>
  static DataShape data_shape(const O& options, TaskFormat format) {
    return toy_data_shape(T(options), format);
  }
  template <class O>
  static std::unique_ptr<DataSource> source(const O& options, TaskFormat format) {
    return toy_source(std::make_unique<T>(options), format);
  }
};

// A toy task as a DataSource, in one layout; and the shape of that layout's data.
std::unique_ptr<DataSource> toy_source(std::unique_ptr<SequenceTask> task, TaskFormat format);
DataShape toy_data_shape(const SequenceTask& task, TaskFormat format);

// The registered toy task `name` built from options given as YAML ("{length: 8, symbols: 4}"), checked
// as a config's would be: for tests and tools that work with a task's problems directly.
std::unique_ptr<SequenceTask> make_toy_task(const std::string& name, const std::string& options_yaml = "{}");

}  // namespace attnlab::data
