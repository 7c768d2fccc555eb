// The task registry and the built-in tasks' sources: the toy sequence tasks (generated from a seed), the
// character-level text (char_text) and the image tasks (quadrants, fashion_mnist), each registered with
// the task.* keys it reads.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>

#include "datasets/char_text.hpp"
#include "datasets/source.hpp"
#include "framework/io/text.hpp"

template <>
attnlab::data::TaskRegistry& attnlab::data::TaskRegistry::instance() {
  static attnlab::data::TaskRegistry registry("task");
  return registry;
}

namespace attnlab::data {

std::unique_ptr<DataSource> make_data_source(const TaskConfig& config, TaskFormat format) {
  const TaskInfo& task = TaskRegistry::instance().find(config.name);
  task.check(config);
  const auto formats = task.formats(config);
  if (std::find(formats.begin(), formats.end(), format) == formats.end()) {
    throw std::invalid_argument("task '" + config.name + "' has no " + task_format_name(format) + " format");
  }
  return task.make(config, format);
}

Batch DataSource::held_out_batch(std::size_t, std::size_t) const {
  throw std::logic_error("this task generates its held-out examples; it has no held-out split to walk");
}

std::vector<std::int64_t> DataSource::encode_source(const std::string& text) const {
  if (const std::string problem = text_problem(text); !problem.empty()) throw std::invalid_argument(problem);
  std::vector<std::int64_t> ids = source_ids(text);
  if (ids.empty()) throw std::invalid_argument("the source is empty: give the words of a source sentence");
  return ids;
}

std::vector<std::int64_t> DataSource::source_ids(const std::string& text) const {
  const DataShape s = shape();
  std::vector<std::int64_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    std::size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || static_cast<std::size_t>(id) >= s.vocab_size) {
      throw std::invalid_argument("'" + word + "' is not a token id of this task: give ids below " + std::to_string(s.vocab_size) +
                                  " separated by spaces, e.g. \"2 3 4\"");
    }
    ids.push_back(id);
  }
  if (ids.empty()) throw std::invalid_argument("the source is empty: give token ids separated by spaces, e.g. \"2 3 4\"");
  return ids;
}

std::string DataSource::decode_target(const std::vector<std::int64_t>& ids) const {
  const std::int64_t eos = shape().eos;
  std::string text;
  for (std::int64_t id : ids) {
    if (id == eos) break;
    text += (text.empty() ? "" : " ") + target_label(id);
  }
  return text;
}

namespace {

// ---- toy tasks ----

class ToySource : public DataSource {
 public:
  ToySource(const TaskConfig& config, TaskFormat format) : task_(make_toy_task(toy_options(config))), format_(format) {}
  static ToyTaskOptions toy_options(const TaskConfig& config) {
    ToyTaskOptions o = config.toy;
    o.name = config.name;
    return o;
  }
  static DataShape shape_of(const SequenceTask& task, TaskFormat format) {
    DataShape s;
    s.vocab_size = task.vocab_size();
    s.num_classes = format == TaskFormat::classification ? task.num_classes() : task.vocab_size();
    s.max_len = task.max_length(format);
    s.padded = task.variable_length();
    if (format == TaskFormat::seq2seq) {  // one vocabulary for both sides, EOS included
      s.vocab_size = s.num_classes = task.vocab_size() + 1;
      s.target_max_len = task.max_target_length();
      s.bos = kSep;
      s.eos = task.eos();
      s.shared_vocabulary = true;
    }
    return s;
  }
  DataShape shape() const override { return shape_of(*task_, format_); }
  Batch sample(TaskSplit split, std::size_t size, Generator& gen) const override { return task_->batch(split, format_, size, gen); }
  std::string token_label(std::int64_t id, std::size_t) const override {
    return id == kPad ? "pad" : id == kSep ? "sep" : id == task_->eos() ? "eos" : std::to_string(id);
  }
  std::string target_label(std::int64_t id) const override { return id == kSep ? "bos" : token_label(id, 0); }
  bool is_padding(std::int64_t id) const override { return id == kPad; }
  PatchingPairs patching_pairs(std::size_t count, Generator& gen) const override { return task_->patching_pairs(format_, count, gen); }
  TokenProperties token_properties(const Batch& batch) const override { return task_->token_properties(batch.input, format_); }

 private:
  std::unique_ptr<SequenceTask> task_;
  TaskFormat format_;
};

TaskInfo toy_task(const std::string& name, const std::string& description, std::vector<std::string> keys) {
  TaskInfo t;
  t.name = name;
  t.description = description;
  t.keys = std::move(keys);
  t.formats = [](const TaskConfig& c) { return make_toy_task(ToySource::toy_options(c))->formats(); };
  t.check = [](const TaskConfig& c) { check_toy_task(ToySource::toy_options(c)); };
  // The vocabulary and lengths follow from the options alone: building a toy task allocates nothing.
  t.shape = [](const TaskConfig& c, TaskFormat f) { return ToySource::shape_of(*make_toy_task(ToySource::toy_options(c)), f); };
  t.make = [](const TaskConfig& c, TaskFormat f) { return std::unique_ptr<DataSource>(std::make_unique<ToySource>(c, f)); };
  return t;
}

const std::vector<std::string> kTransformKeys{"length", "min_length", "symbols", "held_out_fraction"};
ATTNLAB_REGISTER_TASK(toy_task("copy", "copy a sequence of random symbols", kTransformKeys));
ATTNLAB_REGISTER_TASK(toy_task("reverse", "reverse a sequence of random symbols", kTransformKeys));
ATTNLAB_REGISTER_TASK(toy_task("sort", "sort a sequence of random symbols (with repeats)", kTransformKeys));
ATTNLAB_REGISTER_TASK(toy_task("majority", "the most frequent symbol of a sequence (one label)", {"length", "symbols", "held_out_fraction"}));
ATTNLAB_REGISTER_TASK(toy_task("induction", "a segment of symbols, then the same again (induction heads)",
                               {"length", "symbols", "gap", "held_out_fraction"}));
ATTNLAB_REGISTER_TASK(toy_task("mqar", "multi-query associative recall (Zoology)",
                               {"symbols", "pairs", "queries", "sequence_length", "random_filler", "held_out_fraction"}));

// ---- character-level text ----

class CharTextSource : public DataSource {
 public:
  explicit CharTextSource(const TaskConfig& c)
      : text_(c.path, c.train_fraction, c.block_size), block_size_(c.block_size) {}
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
  std::string token_label(std::int64_t id, std::size_t) const override {
    const char ch = text_.vocabulary().chars().at(static_cast<std::size_t>(id));
    return ch == ' ' ? "\u2423" : ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : std::string(1, ch);
  }
  std::string vocabulary() const override { return text_.vocabulary().chars(); }

 private:
  std::size_t full_windows() const { return (text_.size(Split::validation) - 1) / block_size_; }
  std::size_t tail() const { return (text_.size(Split::validation) - 1) % block_size_; }
  CharTextDataset text_;
  std::size_t block_size_;
};

TaskInfo char_text_task() {
  TaskInfo t;
  t.name = "char_text";
  t.description = "character-level text from a file (Tiny Shakespeare: scripts/get_data.sh)";
  t.keys = {"path", "block_size", "train_fraction"};
  t.held_out_split = true;
  t.formats = [](const TaskConfig&) { return std::vector<TaskFormat>{TaskFormat::causal_lm}; };
  t.check = [](const TaskConfig& c) {
    if (c.path.empty()) throw OptionError("path", "task.path is required for char_text: the text file to train on");
    if (c.block_size == 0) throw OptionError("block_size", "task.block_size must be at least 1");
    if (!(c.train_fraction > 0 && c.train_fraction < 1)) {
      throw OptionError("train_fraction", "task.train_fraction must be in (0, 1)");
    }
  };
  t.shape = [](const TaskConfig& c, TaskFormat) {
    DataShape s;
    s.vocab_size = s.num_classes = 256;  // at most one id per byte value; the file says how many
    s.max_len = c.block_size;
    return s;
  };
  t.make = [](const TaskConfig& c, TaskFormat) { return std::unique_ptr<DataSource>(std::make_unique<CharTextSource>(c)); };
  return t;
}
ATTNLAB_REGISTER_TASK(char_text_task());

// ---- images ----

class ImageSource : public DataSource {
 public:
  explicit ImageSource(std::unique_ptr<ImageDataset> images) : images_(std::move(images)) {}
  static DataShape shape_of(std::size_t side, std::size_t classes) {
    DataShape s;
    s.channels = 1;
    s.height = s.width = side;
    s.num_classes = classes;
    return s;
  }
  DataShape shape() const override {
    DataShape s = shape_of(images_->height(), images_->num_classes());
    s.width = images_->width();
    s.channels = images_->channels();
    return s;
  }
  Batch sample(TaskSplit split, std::size_t size, Generator& gen) const override {
    const ImageBatch b = images_->batch(split == TaskSplit::held_out, size, gen);
    return {b.images, b.labels, Tensor()};
  }
  std::size_t held_out_batches(std::size_t size) const override { return (images_->held_out_size() + size - 1) / size; }
  Batch held_out_batch(std::size_t index, std::size_t size) const override {
    const std::size_t first = index * size;
    const ImageBatch b = images_->held_out_examples(first, std::min(size, images_->held_out_size() - first));
    return {b.images, b.labels, Tensor()};
  }
  bool token_inputs() const override { return false; }

 private:
  std::unique_ptr<ImageDataset> images_;
};

const char* const kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

TaskInfo quadrants_task() {
  TaskInfo t;
  t.name = "quadrants";
  t.description = "which quadrant of a noisy image holds a bright square (synthetic, no files)";
  t.keys = {"image_size"};
  t.formats = [](const TaskConfig&) { return std::vector<TaskFormat>{TaskFormat::images}; };
  t.check = [](const TaskConfig& c) {
    if (c.image_size < 4 || c.image_size % 2 != 0) {
      throw OptionError("image_size", "task.image_size must be even and at least 4 for quadrants, got " + std::to_string(c.image_size));
    }
  };
  t.shape = [](const TaskConfig& c, TaskFormat) { return ImageSource::shape_of(c.image_size, 4); };
  t.make = [](const TaskConfig& c, TaskFormat) {
    return std::unique_ptr<DataSource>(std::make_unique<ImageSource>(make_quadrant_task(c.image_size)));
  };
  return t;
}
ATTNLAB_REGISTER_TASK(quadrants_task());

TaskInfo fashion_mnist_task() {
  TaskInfo t;
  t.name = "fashion_mnist";
  t.description = std::string("Fashion-MNIST, 28x28 grey images in 10 classes (IDX files; default ") + kFashionMnistDir + ")";
  t.keys = {"path", "flip", "shift"};
  t.held_out_split = true;
  t.formats = [](const TaskConfig&) { return std::vector<TaskFormat>{TaskFormat::images}; };
  t.check = [](const TaskConfig& c) {
    if (c.augment.shift > 13) throw OptionError("shift", "task.shift must be at most 13 pixels");
    if (const std::string problem = idx_folder_problem(c.path.empty() ? kFashionMnistDir : c.path); !problem.empty())
      throw OptionError("path", "task.path: " + problem);
  };
  t.shape = [](const TaskConfig&, TaskFormat) { return ImageSource::shape_of(28, 10); };
  t.make = [](const TaskConfig& c, TaskFormat) {
    return std::unique_ptr<DataSource>(std::make_unique<ImageSource>(load_idx_dataset(c.path.empty() ? kFashionMnistDir : c.path, c.augment)));
  };
  return t;
}
ATTNLAB_REGISTER_TASK(fashion_mnist_task());

}  // namespace
}  // namespace attnlab::data
