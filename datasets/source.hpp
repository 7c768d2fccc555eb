// Data sources behind one interface, and the registry of tasks a config can name (`task.name`). A task
// is one file (datasets/tasks/, or beside the data it reads) whose class states its name, description
// and options once, and one line registers it (docs/extending.md):
//
//   class MyTask {
//    public:
//     static constexpr const char* kName = "my_task";
//     static constexpr const char* kDescription = "what it is";
//     struct Options { std::size_t size = 8; };                    // the task.* keys, defaults in the members
//     static Schema<Options> options_schema();                     // each key described once
//     static std::vector<TaskFormat> layouts(const Options&);      // the layouts it can produce
//     static DataShape data_shape(const Options&, TaskFormat);     // without reading any file
//     static std::unique_ptr<DataSource> source(const Options&, TaskFormat);
//   };
//   ATTNLAB_REGISTER_TASK(MyTask);
//
// Optional: `static void check(const Options&, const ConfigNode&)`, checks across options at their keys
// (it may look whether files exist; it reads none), and `static constexpr bool kHeldOutSplit = true`, a
// finite held-out split to walk in order (train.eval_batches: 0). A toy sequence task derives from
// SequenceTask and ToyTaskRegistration (toy_tasks.hpp), which gives it the three functions.
//
// Legend: B batch, T tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/io/component.hpp"
#include "framework/tensor/batch.hpp"
#include "framework/tensor/random.hpp"
#include "framework/tensor/registry.hpp"

namespace attnlab::data {

using attnlab::TaskFormat;  // framework/tensor/batch.hpp: the layouts a task can produce
using attnlab::PatchingPairs;

enum class TaskSplit { train, held_out };

constexpr std::int64_t kIgnore = -100;  // targets not scored (cross_entropy's ignore_index)

// Token rows of different lengths as one [B, T] tensor padded with `fill` to the longest, and the mask
// [B, T] (true at padding; undefined when no row is padded).
struct PaddedRows {
  Tensor ids, mask;
};
PaddedRows pad_rows(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t fill);

// Metrics over logits [B, T, V] (or [B, K]) and targets from a batch: the share of scored tokens
// predicted right, and the share of sequences whose every scored token is right.
struct SequenceMetrics {
  double token_accuracy = 0;
  double exact_match = 0;
  std::size_t scored_tokens = 0;
};
SequenceMetrics sequence_metrics(const Tensor& logits, const Tensor& target);

// FNV-1a over 64 bits, for DataSource::fingerprint.
class Fnv1a {
 public:
  void add(const void* bytes, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) hash_ = (hash_ ^ static_cast<const unsigned char*>(bytes)[i]) * 0x100000001b3ULL;
  }
  void add(const std::vector<std::int64_t>& ids) {
    const std::uint64_t n = ids.size();
    add(&n, sizeof n);
    add(ids.data(), ids.size() * sizeof(std::int64_t));
  }
  void add(const std::vector<std::string>& words) {  // each word ended by a NUL, the list by its length
    for (const std::string& w : words) add(w.c_str(), w.size() + 1);
    const std::uint64_t n = words.size();
    add(&n, sizeof n);
  }
  std::string hex() const;

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual DataShape shape() const = 0;
  // `size` examples of a split drawn from `gen` (the same generator state gives the same batch).
  virtual Batch sample(TaskSplit split, std::size_t size, Generator& gen) const = 0;
  // The whole held-out split in order, as batches of up to `size` examples: how many, and batch `index`.
  // 0 batches when the task generates its held-out examples afresh (no finite split to walk).
  virtual std::size_t held_out_batches(std::size_t /*size*/) const { return 0; }
  virtual Batch held_out_batch(std::size_t index, std::size_t size) const;
  // How token `id` at `position` of an input reads on a heatmap's axis (token inputs only).
  virtual std::string token_label(std::int64_t id, std::size_t /*position*/) const { return std::to_string(id); }
  // seq2seq: how token `id` of a decoder input or target reads ("bos", a word, "eos").
  virtual std::string target_label(std::int64_t id) const { return token_label(id, 0); }
  // Whether inputs are token ids (pattern metrics that compare tokens need them).
  virtual bool token_inputs() const { return true; }
  // Whether token `id` is padding (never an earlier occurrence of anything for the induction score).
  virtual bool is_padding(std::int64_t /*id*/) const { return false; }
  // seq2seq: the ids of a source the user typed (`attnlab translate --input`): an error when the text is
  // not text (control characters, bytes that are not UTF-8) or holds no token, whatever the task (these
  // checks are here; a task reads its words in source_ids). And the text of decoded target ids up to the
  // end token. Toy tasks read and write token ids separated by spaces.
  std::vector<std::int64_t> encode_source(const std::string& text) const;
  virtual std::string decode_target(const std::vector<std::int64_t>& ids) const;
  // The ids of tokens written by their names (token_label at position 0), separated by spaces: "pad sep 3
  // 4" for a toy task, SCAN's words, a text run's characters (a space written as \u2423). The inverse of
  // naming them; a word that names no token is an error that names it and lists the task's names.
  std::vector<std::int64_t> token_ids(const std::string& text) const;
  // Every id's name (token_label at position 0), in id order.
  std::vector<std::string> token_names() const;
  // The task's token names for an error message: all of them, or the first and last few of a long list.
  std::string token_names_hint() const;
  // What a checkpoint must keep to decode outputs without the data (char_text: its characters).
  virtual std::string vocabulary() const { return ""; }
  // What identifies data read from files: a hash of what was read, kept in the checkpoint so that a run
  // resumed or evaluated on other contents (a relative task.path read from another folder, an edited
  // file) is refused; "" for data the config alone generates.
  virtual std::string fingerprint() const { return ""; }
  // `count` clean/corrupted pairs drawn from the held-out split with `gen`; empty (size 0) when the task
  // has no corruption that changes its answer in a known way.
  virtual PatchingPairs patching_pairs(std::size_t /*count*/, Generator& /*gen*/) const { return {}; }
  // Properties of each input token that the task defines, for linear probes of the residual stream
  // (besides position, token and previous token, which every sequence has): name -> one label per
  // element of batch.input ([B * T], row-major), -1 where the property is undefined. mqar:
  // "value_of_key", the value a key is paired with in its example.
  using TokenProperties = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;
  virtual TokenProperties token_properties(const Batch& /*batch*/) const { return {}; }
  // A task whose tokens 0 .. p-1 are the integers modulo p, answered with (a + sign * b) mod p (the
  // modular task: sign 1 for add, -1 for sub, 0 for an operation that is not a sum): what the Fourier
  // analysis of grokking needs. p 0: not such a task.
  struct Modular {
    std::size_t p = 0;
    int sign = 0;
  };
  virtual Modular modular() const { return {}; }

 protected:
  // The ids of the words of a source text (token_ids unless the task reads sources otherwise).
  virtual std::vector<std::int64_t> source_ids(const std::string& text) const { return token_ids(text); }
};

// A task as the registry knows it, built from its class's declarations by task_info<T>().
struct TaskInfo {
  std::string name;
  std::string description;
  OptionsSpec options;            // its task.* keys
  bool held_out_split = false;    // it has a finite held-out split to walk in order (train.eval_batches: 0)
  // The layouts it can produce for these options (a model kind needs one of them).
  std::function<std::vector<TaskFormat>(const ComponentOptions&)> formats;
  // The shape of its data in `format`, without reading files (a vocabulary it cannot know yet is an
  // upper bound).
  std::function<DataShape(const ComponentOptions&, TaskFormat)> shape;
  // The source itself (may read files; errors name them).
  std::function<std::unique_ptr<DataSource>(const ComponentOptions&, TaskFormat)> make;
};

// name -> TaskInfo ("task 'x' is not among [...]").
using TaskRegistry = Registry<TaskInfo>;

namespace task_detail {
template <class T, class = void>
struct held_out_split : std::false_type {};
template <class T>
struct held_out_split<T, std::void_t<decltype(T::kHeldOutSplit)>> : std::bool_constant<T::kHeldOutSplit> {};
}  // namespace task_detail

template <class T>
TaskInfo task_info() {
  TaskInfo info;
  info.name = T::kName;
  info.description = T::kDescription;
  info.options = options_spec<T>();
  info.held_out_split = task_detail::held_out_split<T>::value;
  // The layouts and shapes follow from the options read (config validation checks them first).
  info.formats = [](const ComponentOptions& o) { return T::layouts(read_options<T>(o, false)); };
  info.shape = [](const ComponentOptions& o, TaskFormat f) { return T::data_shape(read_options<T>(o, false), f); };
  info.make = [](const ComponentOptions& o, TaskFormat f) { return T::source(read_options<T>(o), f); };
  return info;
}

// The source of the task `task` names, in `format` (an error naming the formats it has otherwise).
std::unique_ptr<DataSource> make_data_source(const ComponentChoice& task, TaskFormat format);

}  // namespace attnlab::data

template <>
attnlab::data::TaskRegistry& attnlab::data::TaskRegistry::instance();

#define ATTNLAB_TASK_CONCAT_(a, b) a##b
#define ATTNLAB_TASK_CONCAT(a, b) ATTNLAB_TASK_CONCAT_(a, b)
// One line at the bottom of a task's file registers it under its kName.
#define ATTNLAB_REGISTER_TASK(Task) \
  static const bool ATTNLAB_TASK_CONCAT(attnlab_task_registered_, Task) = \
      ::attnlab::data::TaskRegistry::instance().add(::attnlab::data::task_info<Task>())
