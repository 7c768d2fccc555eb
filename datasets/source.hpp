// Data sources behind one interface, and the registry of tasks a config can name (`task.name`). A task
// is one class deriving from DataSource plus its registration:
//
//   ATTNLAB_REGISTER_TASK(TaskInfo{"my_task", "what it is", keys, formats, check, shape, make});
//
// at the bottom of its own .cpp in datasets/. The config reads every task.* key into one TaskConfig;
// each task says which of them it reads (a key set to a non-default value that the task does not read is
// a config error), checks them (OptionError names the key, so the config points at its line), and
// says the shape of its data without reading any file (config validation sizes the model from it).
//
// Legend: B batch, T tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/images.hpp"
#include "datasets/scan.hpp"
#include "datasets/toy_tasks.hpp"
#include "framework/tensor/batch.hpp"
#include "framework/tensor/registry.hpp"

namespace attnlab::data {

// Every task.* key of a config; each task reads some of them.
struct TaskConfig {
  std::string name = "reverse";
  ToyTaskOptions toy;            // length, symbols, pairs, queries, gap, sequence_length, random_filler, held_out_fraction
  std::string path;              // char_text: the text file; fashion_mnist: the folder of IDX files; scan: training pairs
  std::string test_path;         // scan: held-out pairs (with path)
  ScanSplit scan_split = ScanSplit::simple;  // scan: which split of the generated commands
  std::uint64_t split_seed = 0;  // scan: the simple split's shuffle
  std::size_t block_size = 64;   // char_text: tokens per training window
  double train_fraction = 0.9;   // char_text
  std::size_t image_size = 16;   // quadrants: images are image_size x image_size
  ImageAugment augment;          // fashion_mnist: flip, shift of training images
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
  // What a checkpoint must keep to decode outputs without the data (char_text: its characters).
  virtual std::string vocabulary() const { return ""; }
  // `count` clean/corrupted pairs drawn from the held-out split with `gen`; empty (size 0) when the task
  // has no corruption that changes its answer in a known way.
  virtual PatchingPairs patching_pairs(std::size_t /*count*/, Generator& /*gen*/) const { return {}; }
  // Properties of each input token that the task defines, for linear probes of the residual stream
  // (besides position, token and previous token, which every sequence has): name -> one label per
  // element of batch.input ([B * T], row-major), -1 where the property is undefined. mqar:
  // "value_of_key", the value a key is paired with in its example.
  using TokenProperties = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;
  virtual TokenProperties token_properties(const Batch& /*batch*/) const { return {}; }

 protected:
  // The ids of the words of a source text (token ids separated by spaces unless the task has words).
  virtual std::vector<std::int64_t> source_ids(const std::string& text) const;
};

struct TaskInfo {
  std::string name;
  std::string description;
  std::vector<std::string> keys;  // the task.* keys it reads, besides name
  bool held_out_split = false;    // it has a finite held-out split to walk in order (train.eval_batches: 0)
  // The layouts it can produce for this config (a model kind needs one of them).
  std::function<std::vector<TaskFormat>(const TaskConfig&)> formats;
  // Checks the options it reads; throws OptionError. Reads no files (it may look whether they exist).
  std::function<void(const TaskConfig&)> check;
  // The shape of its data in `format`, without reading files (a vocabulary it cannot know yet is an
  // upper bound).
  std::function<DataShape(const TaskConfig&, TaskFormat)> shape;
  // The source itself (may read files; errors name them).
  std::function<std::unique_ptr<DataSource>(const TaskConfig&, TaskFormat)> make;
};

// name -> TaskInfo ("task 'x' is not among [...]").
using TaskRegistry = Registry<TaskInfo>;

// The task's source for the config, checked first.
std::unique_ptr<DataSource> make_data_source(const TaskConfig& config, TaskFormat format);

}  // namespace attnlab::data

template <>
attnlab::data::TaskRegistry& attnlab::data::TaskRegistry::instance();

#define ATTNLAB_TASK_CONCAT_(a, b) a##b
#define ATTNLAB_TASK_CONCAT(a, b) ATTNLAB_TASK_CONCAT_(a, b)
// One line at the bottom of a task's file registers it (a unique id per line of the file).
#define ATTNLAB_REGISTER_TASK(info) \
  static const bool ATTNLAB_TASK_CONCAT(attnlab_task_registered_, __LINE__) = ::attnlab::data::TaskRegistry::instance().add(info)
