#include "datasets/toy_tasks.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>


namespace attnlab::data {

std::vector<std::int64_t> SequenceTask::random_symbols(std::size_t n, std::size_t symbols, Generator& gen) {
  std::vector<std::int64_t> out(n);
  for (auto& t : out) t = kFirstSymbol + static_cast<std::int64_t>(gen.next_below(symbols));
  return out;
}

bool SequenceTask::in_held_out(const std::vector<std::int64_t>& source) const {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the tokens
  for (std::int64_t t : source) {
    h ^= static_cast<std::uint64_t>(t);
    h *= 1099511628211ULL;
  }
  return static_cast<double>(h % 1000000) < held_out_fraction_ * 1000000.0;
}

void SequenceTask::check_format(TaskFormat format) const {
  const auto supported = formats();
  if (std::find(supported.begin(), supported.end(), format) == supported.end()) {
    std::string list;
    for (TaskFormat f : supported) list += (list.empty() ? "" : ", ") + std::string(task_format_name(f));
    throw std::invalid_argument("task '" + name() + "' has no " + task_format_name(format) + " format; it has [" + list + "]");
  }
}

SequenceTask::Problem SequenceTask::split_problem(TaskSplit split, Generator& gen, const Problem* like) const {
  for (int attempt = 0; attempt < 100000; ++attempt) {
    Problem p = like ? problem_like(*like, gen) : problem(gen);
    if (in_held_out(p.source) == (split == TaskSplit::held_out)) return p;
  }
  throw std::runtime_error("task '" + name() + "': no " + (split == TaskSplit::train ? "training" : "held-out") +
                           " example found in 100000 draws; the task has too few distinct sequences for this split "
                           "(raise task.length or task.symbols, or change task.held_out_fraction)");
}

void SequenceTask::check_splits() const {
  Generator gen(0);
  split_problem(TaskSplit::train, gen);
  split_problem(TaskSplit::held_out, gen);
}

SequenceExample SequenceTask::layout(const Problem& p, TaskFormat format) const {
  SequenceExample e;
  if (format == TaskFormat::tagging && !tags_causal_layout()) {
    e.input = p.source;
    e.target = p.answer;
  } else if (format == TaskFormat::classification) {
    e.input = p.source;
    e.target = {p.label};
  } else if (format == TaskFormat::seq2seq) {
    e.input = p.source;
    e.decoder_input = p.answer;
    e.decoder_input.insert(e.decoder_input.begin(), kSep);
    e.target = p.answer;
    e.target.push_back(eos());
  } else {
    // source SEP answer, each token predicting the next; only the scored answer tokens count.
    std::vector<std::int64_t> sequence = p.source;
    sequence.push_back(kSep);
    const std::vector<std::int64_t>& read = p.read.empty() ? p.answer : p.read;
    sequence.insert(sequence.end(), read.begin(), read.end());
    e.input.assign(sequence.begin(), sequence.end() - 1);
    e.target.assign(e.input.size(), kIgnore);
    for (std::size_t i = 0; i < p.answer.size(); ++i)
      if (p.scored.empty() || p.scored[i]) e.target[p.source.size() + i] = p.answer[i];
  }
  return e;
}

std::size_t SequenceTask::answer_position(const Problem& p, std::size_t index, TaskFormat format) const {
  const bool causal_layout = format == TaskFormat::causal_lm || (format == TaskFormat::tagging && tags_causal_layout());
  return causal_layout ? p.source.size() + index : index;
}

SequenceExample SequenceTask::example(TaskSplit split, TaskFormat format, Generator& gen) const {
  check_format(format);
  return layout(split_problem(split, gen), format);
}

std::vector<std::int64_t> SequenceTask::layout_key(const Problem& p) const {
  std::vector<std::int64_t> key{static_cast<std::int64_t>(p.source.size()), static_cast<std::int64_t>(p.answer.size())};
  for (std::int64_t t : p.source) key.push_back(t == kPad);
  for (std::int64_t t : p.read) key.push_back(t == kPad);
  return key;
}

PatchingPairs SequenceTask::patching_pairs(TaskFormat format, std::size_t count, Generator& gen) const {
  check_format(format);
  PatchingPairs pairs;
  if (format == TaskFormat::classification || count == 0) return pairs;
  std::vector<SequenceExample> clean, corrupted;
  Problem first;  // its layout is the set's: the others are drawn like it
  std::vector<std::int64_t> key;
  for (int attempt = 0; attempt < 1000000 && clean.size() < count; ++attempt) {
    const Problem p = split_problem(TaskSplit::held_out, gen, clean.empty() ? nullptr : &first);
    Corruption c;
    if (!corrupt(p, gen, c)) {
      if (clean.empty() && attempt >= 1000) return {};  // this task has no corruption
      continue;
    }
    if (clean.empty()) first = p, key = layout_key(p);
    if (layout_key(p) != key) continue;  // every example of the set shares the first one's layout
    clean.push_back(layout(p, format));
    corrupted.push_back(layout(c.problem, format));
    pairs.position.push_back(answer_position(p, c.index, format));
    pairs.clean_answer.push_back(p.answer[c.index]);
    pairs.corrupted_answer.push_back(c.problem.answer[c.index]);
    pairs.corruption = c.description;
  }
  if (clean.size() < count) throw std::runtime_error("task '" + name() + "': too few held-out examples share one layout for patching");
  pairs.clean = batch_of(clean, format);
  pairs.corrupted = batch_of(corrupted, format);
  return pairs;
}

std::size_t SequenceTask::max_length(TaskFormat format) const {
  const bool causal_layout = format == TaskFormat::causal_lm || (format == TaskFormat::tagging && tags_causal_layout());
  return causal_layout ? source_length() + answer_length() : source_length();
}

SequenceBatch SequenceTask::batch(TaskSplit split, TaskFormat format, std::size_t size, Generator& gen) const {
  std::vector<SequenceExample> examples;
  for (std::size_t b = 0; b < size; ++b) examples.push_back(example(split, format, gen));
  return batch_of(examples, format);
}

SequenceBatch SequenceTask::batch_of(std::vector<SequenceExample> examples, TaskFormat format) {
  const std::size_t size = examples.size();
  if (format == TaskFormat::classification) {
    std::vector<std::int64_t> input, labels;
    for (const SequenceExample& e : examples) {
      input.insert(input.end(), e.input.begin(), e.input.end());
      labels.push_back(e.target[0]);
    }
    return Batch{from_indices(input, {size, examples[0].input.size()}), from_indices(labels, {size}), Tensor()};
  }
  std::vector<std::vector<std::int64_t>> inputs, targets, decoder_inputs;
  for (SequenceExample& e : examples) {
    inputs.push_back(std::move(e.input));
    targets.push_back(std::move(e.target));
    decoder_inputs.push_back(std::move(e.decoder_input));
  }
  SequenceBatch batch;
  const PaddedRows source = pad_rows(inputs, kPad);
  batch.input = source.ids;
  batch.key_padding_mask = source.mask;
  batch.target = pad_rows(targets, kIgnore).ids;
  if (format == TaskFormat::seq2seq) {
    const PaddedRows decoder = pad_rows(decoder_inputs, kPad);
    batch.decoder_input = decoder.ids;
    batch.decoder_padding_mask = decoder.mask;
  }
  return batch;
}

namespace {

// A toy task in one layout.
class ToySource : public DataSource {
 public:
  ToySource(std::unique_ptr<SequenceTask> task, TaskFormat format) : task_(std::move(task)), format_(format) { task_->check_splits(); }
  DataShape shape() const override { return toy_data_shape(*task_, format_); }
  Batch sample(TaskSplit split, std::size_t size, Generator& gen) const override { return task_->batch(split, format_, size, gen); }
  std::string token_label(std::int64_t id, std::size_t) const override {
    return id == kPad ? "pad" : id == kSep ? "sep" : id == task_->eos() ? "eos" : std::to_string(id);
  }
  std::string target_label(std::int64_t id) const override { return id == kSep ? "bos" : token_label(id, 0); }
  bool is_padding(std::int64_t id) const override { return id == kPad; }
  PatchingPairs patching_pairs(std::size_t count, Generator& gen) const override { return task_->patching_pairs(format_, count, gen); }
  // A source holds the task's symbols only: PAD, SEP (the decoder's BOS) and EOS are the layout's.
  std::vector<std::int64_t> source_ids(const std::string& text) const override {
    std::vector<std::int64_t> ids = token_ids(text);
    for (std::int64_t id : ids) {
      if (id >= kFirstSymbol && id < task_->eos()) continue;
      const std::string what = id == kPad ? "padding" : id == kSep ? "the separator (the decoder's BOS)" : "the end token";
      throw std::invalid_argument("'" + token_label(id, 0) + "' is " + what + ", which a source cannot hold: give the task's symbols, " +
                                  token_label(kFirstSymbol, 0) + " to " + token_label(task_->eos() - 1, 0));
    }
    return ids;
  }
  TokenProperties token_properties(const Batch& batch) const override { return task_->token_properties(batch.input, format_); }
  std::unique_ptr<SequenceTask> release() { return std::move(task_); }

 private:
  std::unique_ptr<SequenceTask> task_;
  TaskFormat format_;
};

}  // namespace

std::unique_ptr<DataSource> toy_source(std::unique_ptr<SequenceTask> task, TaskFormat format) {
  return std::make_unique<ToySource>(std::move(task), format);
}

DataShape toy_data_shape(const SequenceTask& task, TaskFormat format) {
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

std::unique_ptr<SequenceTask> make_toy_task(const std::string& name, const std::string& options_yaml) {
  const TaskInfo& info = TaskRegistry::instance().find(name);
  const ComponentOptions options(YAML::Load(options_yaml), "task", std::make_shared<ConfigSource>("the options of task " + name, options_yaml));
  info.options.check(options);
  std::unique_ptr<DataSource> source = info.make(options, info.formats(options).front());
  auto* toy = dynamic_cast<ToySource*>(source.get());
  if (!toy) throw std::invalid_argument("task '" + name + "' is not a toy sequence task");
  return toy->release();
}

}  // namespace attnlab::data
