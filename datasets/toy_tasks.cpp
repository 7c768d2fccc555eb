#include "datasets/toy_tasks.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>


namespace attnlab::data {
namespace {

std::vector<std::int64_t> random_symbols(std::size_t n, std::size_t symbols, Generator& gen) {
  std::vector<std::int64_t> out(n);
  for (auto& t : out) t = kFirstSymbol + static_cast<std::int64_t>(gen.next_below(symbols));
  return out;
}

// copy, reverse and sort: the answer is a function of the source, token for token.
class TransformTask : public SequenceTask {
 public:
  enum class Kind { copy, reverse, sort };
  TransformTask(Kind kind, const ToyTaskOptions& o) : SequenceTask(o.held_out_fraction), kind_(kind), o_(o) {}
  std::string name() const override { return kind_ == Kind::copy ? "copy" : kind_ == Kind::reverse ? "reverse" : "sort"; }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(kFirstSymbol) + o_.symbols; }
  std::vector<TaskFormat> formats() const override { return {TaskFormat::tagging, TaskFormat::causal_lm, TaskFormat::seq2seq}; }
  bool variable_length() const override { return o_.min_length != 0 && o_.min_length < o_.length; }
  Problem problem(Generator& gen) const override {
    const std::size_t shortest = variable_length() ? o_.min_length : o_.length;
    return of_source(random_symbols(shortest + gen.next_below(o_.length - shortest + 1), o_.symbols, gen));
  }

 protected:
  std::size_t source_length() const override { return o_.length; }
  std::size_t answer_length() const override { return o_.length; }
  // A patching set has one length, so that its sources (and the changed token) line up.
  Problem problem_like(const Problem& first, Generator& gen) const override {
    return of_source(random_symbols(first.source.size(), o_.symbols, gen));
  }
  // The middle source token changed to another symbol; scored at the first answer token that changes.
  // The corrupted example reads its own answer (teacher forcing): its inputs differ from the clean ones
  // at that source token and only after the scored position.
  bool corrupt(const Problem& clean, Generator& gen, Corruption& out) const override {
    if (o_.symbols < 2) return false;
    const std::size_t c = clean.source.size() / 2;
    std::vector<std::int64_t> source = clean.source;
    source[c] = kFirstSymbol + (clean.source[c] - kFirstSymbol + 1 + static_cast<std::int64_t>(gen.next_below(o_.symbols - 1))) %
                                   static_cast<std::int64_t>(o_.symbols);
    out.problem = of_source(std::move(source));
    out.index = 0;
    while (out.problem.answer[out.index] == clean.answer[out.index]) ++out.index;
    out.description = "source token " + std::to_string(c) + " changed to another symbol";
    return true;
  }

 private:
  Problem of_source(std::vector<std::int64_t> source) const {
    Problem p;
    p.source = std::move(source);
    p.answer = p.source;
    if (kind_ == Kind::reverse) std::reverse(p.answer.begin(), p.answer.end());
    if (kind_ == Kind::sort) std::sort(p.answer.begin(), p.answer.end());
    return p;
  }
  Kind kind_;
  ToyTaskOptions o_;
};

// Multi-query associative recall (Arora et al. 2023, Zoology): key-value pairs, then queries of the
// keys, each to be answered with its value. Keys and values come from separate symbol ranges.
//   compact (sequence_length 0): k v k v ... SEP q v q v ..., queries drawn with replacement.
//   Zoology (sequence_length T, its input_seq_len): the pairs (distinct keys, distinct values), then
//     T - 2 pairs more tokens in slots of two; `queries` distinct keys, chosen at random, each go to a
//     slot drawn without replacement from a power law that favours the early slots (p(g) ~ (g+1)^(a-1),
//     a = 0.01, as in zoology/data/multiquery_ar.py), the key first and its value, the only scored
//     token, after it. The model reads a random key or value symbol in place of every other token
//     (PAD with random_filler off, zoology's random_non_queries=False), the values included: it never
//     sees an answer, or it could rule out the values already given (values are distinct) and get a
//     third of 8 queries right without recall. The SEP that opens the answer takes the place of
//     zoology's first filler token.
class RecallTask : public SequenceTask {
 public:
  explicit RecallTask(const ToyTaskOptions& o) : SequenceTask(o.held_out_fraction), o_(o) {
    if (o_.queries == 0) o_.queries = o_.pairs;
  }
  std::string name() const override { return "mqar"; }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(kFirstSymbol) + 2 * o_.symbols; }
  // Zoology's layout never shows an answer, so a bidirectional model (linformer's only kind) can tag it;
  // the compact layout reads every value back, which a bidirectional model would simply copy.
  std::vector<TaskFormat> formats() const override {
    if (o_.sequence_length == 0) return {TaskFormat::causal_lm};
    return {TaskFormat::causal_lm, TaskFormat::tagging};
  }
  Problem problem(Generator& gen) const override {
    const auto [keys, values] = draw_pairs(gen);
    Queries queries;
    if (o_.sequence_length == 0) {
      for (std::size_t q = 0; q < o_.queries; ++q) queries.push_back({2 * q, gen.next_below(o_.pairs)});
      return with_queries(keys, values, queries, gen);
    }
    // The slots come in draw order, so likely ones first. Zoology hands them to the pairs in pair order,
    // and then the earliest query asks the first pair 27% of the time instead of 1/8, a positional
    // shortcut a model of ours learned instead of recall; here the pairs take them in random order.
    const std::vector<std::size_t> slots = power_law_slots(answer_length() / 2, o_.queries, gen);
    std::vector<std::size_t> pair(o_.pairs);
    for (std::size_t i = 0; i < o_.pairs; ++i) pair[i] = i;
    for (std::size_t q = 0; q < o_.queries; ++q) std::swap(pair[q], pair[q + gen.next_below(o_.pairs - q)]);
    for (std::size_t q = 0; q < o_.queries; ++q) queries.push_back({2 * slots[q], pair[q]});
    return with_queries(keys, values, queries, gen);
  }

 protected:
  std::size_t source_length() const override { return 2 * o_.pairs; }
  std::size_t answer_length() const override {
    return o_.sequence_length == 0 ? 2 * o_.queries : o_.sequence_length - 2 * o_.pairs;
  }
  bool tags_causal_layout() const override { return o_.sequence_length != 0; }
  // The value of the key that the earliest query asks changed to another value symbol (one no other pair
  // holds in Zoology's layout, whose values are distinct); scored at that query's answer. The model
  // reads the same tokens after SEP as in the clean example, so the inputs differ in that value alone.
  bool corrupt(const Problem& clean, Generator& gen, Corruption& out) const override {
    const auto [key_at, pair] = queries_of(clean).front();
    const std::size_t index = key_at + 1;
    std::vector<std::int64_t> taken;
    for (std::size_t i = 0; i < o_.pairs; ++i) taken.push_back(clean.source[2 * i + 1]);
    std::int64_t value = clean.source[2 * pair + 1];
    for (int attempt = 0; attempt < 1000 && std::find(taken.begin(), taken.end(), value) != taken.end(); ++attempt) {
      value = kFirstSymbol + static_cast<std::int64_t>(o_.symbols + gen.next_below(o_.symbols));
      if (o_.sequence_length == 0 && value != clean.source[2 * pair + 1]) break;  // the compact layout's values may repeat
    }
    if (value == clean.source[2 * pair + 1] || (o_.sequence_length != 0 && std::find(taken.begin(), taken.end(), value) != taken.end())) return false;
    out.problem = clean;
    if (out.problem.read.empty()) out.problem.read = clean.answer;  // what the model reads stays as it was
    out.problem.source[2 * pair + 1] = value;
    out.problem.answer[index] = value;
    out.index = index;
    out.description = "the value of the key that the earliest query asks changed to another value";
    return true;
  }
  // Sets of one layout share where every query sits and which pair it asks (keys, values and filler vary).
  std::vector<std::int64_t> layout_key(const Problem& p) const override {
    std::vector<std::int64_t> key;
    for (const auto& [at, pair] : queries_of(p)) key.insert(key.end(), {static_cast<std::int64_t>(at), static_cast<std::int64_t>(pair)});
    return key;
  }
  // "value_of_key": at every token that is one of its example's keys (in the pairs, at a query, or as
  // random filler), the value that key is paired with; -1 elsewhere. Every layout opens with the pairs.
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> token_properties(const Tensor& input, TaskFormat) const override {
    const std::size_t rows = input.size(0), t = input.size(1);
    const std::int64_t* ids = input.data<std::int64_t>();
    std::vector<std::int64_t> value(rows * t, -1);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::int64_t* row = ids + r * t;
      for (std::size_t i = 0; i < t; ++i)
        for (std::size_t pair = 0; pair < o_.pairs && 2 * pair + 1 < t; ++pair)
          if (row[i] == row[2 * pair]) value[r * t + i] = row[2 * pair + 1];
    }
    return {{"value_of_key", value}};
  }
  // Zoology's layout draws its slots by a power law: a set of one layout must be drawn, not waited for.
  Problem problem_like(const Problem& first, Generator& gen) const override {
    const auto [keys, values] = draw_pairs(gen);
    return with_queries(keys, values, queries_of(first), gen);
  }

 private:
  // Where each query's key sits in the answer, and the pair it asks.
  using Queries = std::vector<std::pair<std::size_t, std::size_t>>;
  // Keys (distinct) and values (distinct in Zoology's layout), of separate symbol ranges.
  std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> draw_pairs(Generator& gen) const {
    const std::vector<std::int64_t> keys = distinct_symbols(o_.pairs, 0, gen);
    std::vector<std::int64_t> values;
    if (o_.sequence_length == 0) {
      for (std::size_t i = 0; i < o_.pairs; ++i)
        values.push_back(kFirstSymbol + static_cast<std::int64_t>(o_.symbols + gen.next_below(o_.symbols)));
    } else {
      values = distinct_symbols(o_.pairs, o_.symbols, gen);
    }
    return {keys, values};
  }
  // The pairs, then the queries, each its key and its value (scored); Zoology's layout reads filler, drawn
  // here, everywhere but at the query keys (the compact layout has no room left between its queries).
  Problem with_queries(const std::vector<std::int64_t>& keys, const std::vector<std::int64_t>& values, const Queries& queries,
                       Generator& gen) const {
    Problem p;
    for (std::size_t i = 0; i < o_.pairs; ++i) p.source.insert(p.source.end(), {keys[i], values[i]});
    if (o_.sequence_length != 0) {
      p.read = o_.random_filler ? random_symbols(answer_length(), 2 * o_.symbols, gen) : std::vector<std::int64_t>(answer_length(), kPad);
    }
    p.answer = p.read.empty() ? std::vector<std::int64_t>(answer_length(), kPad) : p.read;
    p.scored.assign(answer_length(), false);
    for (const auto& [at, pair] : queries) {
      if (!p.read.empty()) p.read[at] = keys[pair];
      p.answer[at] = keys[pair];
      p.answer[at + 1] = values[pair];
      p.scored[at + 1] = true;
    }
    return p;
  }
  // The queries of a problem, in answer order.
  Queries queries_of(const Problem& p) const {
    Queries queries;
    for (std::size_t at = 0; at + 1 < p.answer.size(); ++at) {
      if (!p.scored[at + 1]) continue;
      std::size_t pair = 0;
      while (pair + 1 < o_.pairs && p.source[2 * pair] != p.answer[at]) ++pair;
      queries.push_back({at, pair});
    }
    return queries;
  }
  // n distinct symbols of the range [offset, offset + symbols), in random order.
  std::vector<std::int64_t> distinct_symbols(std::size_t n, std::size_t offset, Generator& gen) const {
    std::vector<std::int64_t> pool(o_.symbols);
    for (std::size_t i = 0; i < o_.symbols; ++i) pool[i] = kFirstSymbol + static_cast<std::int64_t>(offset + i);
    for (std::size_t i = 0; i < n; ++i) std::swap(pool[i], pool[i + gen.next_below(o_.symbols - i)]);
    pool.resize(n);
    return pool;
  }
  // n distinct slots of [0, slots), each drawn from the power law over those not yet taken.
  static std::vector<std::size_t> power_law_slots(std::size_t slots, std::size_t n, Generator& gen) {
    constexpr double kPowerA = 0.01;  // zoology's power_a default
    std::vector<double> weight(slots);
    for (std::size_t g = 0; g < slots; ++g) weight[g] = std::pow(static_cast<double>(g + 1), kPowerA - 1.0);
    std::vector<std::size_t> chosen;
    for (std::size_t k = 0; k < n; ++k) {
      double total = 0;
      for (double w : weight) total += w;
      double u = gen.next_double() * total;
      std::size_t g = 0;
      while (g + 1 < slots && (weight[g] == 0 || u >= weight[g])) u -= weight[g++];
      while (weight[g] == 0) --g;  // rounding ran past the last free slot
      chosen.push_back(g);
      weight[g] = 0;
    }
    return chosen;
  }
  ToyTaskOptions o_;
};

// Induction heads: a random segment, then the same segment again; every token of the repeat but the
// first can be predicted by finding the earlier occurrence of the current token and copying its successor.
// With gap > 0 the first segment sits at a random offset among `gap` pad tokens, so the distance between
// the two occurrences varies and a fixed positional offset cannot stand in for matching content; its
// symbols are then distinct, so that every token's successor is unambiguous.
class InductionTask : public SequenceTask {
 public:
  explicit InductionTask(const ToyTaskOptions& o) : SequenceTask(o.held_out_fraction), o_(o) {}
  std::string name() const override { return "induction"; }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(kFirstSymbol) + o_.symbols; }
  std::vector<TaskFormat> formats() const override { return {TaskFormat::causal_lm}; }
  Problem problem(Generator& gen) const override {
    if (o_.gap == 0) return placed(random_symbols(o_.length, o_.symbols, gen), 0);
    std::vector<std::int64_t> segment = distinct_segment(gen);
    return placed(std::move(segment), gen.next_below(o_.gap + 1));
  }

 protected:
  // The first copy replaced by its own symbols in another order: the repeat reads as before, but what
  // follows the middle token of the repeat in the first copy (its induction answer) has changed. Only
  // segments where that token occurs once qualify (with gap 0 symbols may repeat), so that the clean and
  // the corrupted answer are each the one successor of its one earlier occurrence.
  bool corrupt(const Problem& clean, Generator& gen, Corruption& out) const override {
    const std::size_t k = o_.length / 2;  // answer index: predicted after reading answer[k - 1]
    if (k < 1 || o_.length < 3) return false;
    if (std::count(clean.answer.begin(), clean.answer.end(), clean.answer[k - 1]) != 1) return false;
    const std::size_t offset = offset_of(clean);
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::vector<std::int64_t> shuffled(clean.answer);
      for (std::size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[gen.next_below(i)]);
      const auto at = std::find(shuffled.begin(), shuffled.end(), clean.answer[k - 1]);
      if (at + 1 >= shuffled.end() || *(at + 1) == clean.answer[k]) continue;
      out.problem = clean;
      std::copy(shuffled.begin(), shuffled.end(), out.problem.source.begin() + static_cast<std::ptrdiff_t>(offset));
      out.problem.read = clean.answer;    // the repeat reads as before
      out.problem.answer[k] = *(at + 1);  // what an induction head reads from the corrupted first copy
      out.index = k;
      out.description = "the first copy of the segment replaced by its symbols in another order";
      return true;
    }
    return false;
  }
  std::size_t source_length() const override { return o_.length + o_.gap; }
  std::size_t answer_length() const override { return o_.length; }
  // A patching set has one offset of the first copy, so that the copies line up.
  Problem problem_like(const Problem& first, Generator& gen) const override {
    if (o_.gap == 0) return problem(gen);
    return placed(distinct_segment(gen), offset_of(first));
  }

 private:
  // o_.length distinct symbols in random order.
  std::vector<std::int64_t> distinct_segment(Generator& gen) const {
    std::vector<std::int64_t> symbols(o_.symbols);
    for (std::size_t i = 0; i < o_.symbols; ++i) symbols[i] = kFirstSymbol + static_cast<std::int64_t>(i);
    for (std::size_t i = 0; i < o_.length; ++i) std::swap(symbols[i], symbols[i + gen.next_below(o_.symbols - i)]);
    symbols.resize(o_.length);
    return symbols;
  }
  // The segment at `offset` among the gap's pads, then its repeat.
  Problem placed(std::vector<std::int64_t> segment, std::size_t offset) const {
    Problem p;
    p.answer = std::move(segment);
    p.source.assign(o_.length + o_.gap, kPad);
    std::copy(p.answer.begin(), p.answer.end(), p.source.begin() + static_cast<std::ptrdiff_t>(offset));
    p.scored.assign(o_.length, true);
    p.scored[0] = false;  // nothing earlier says what follows the separator
    return p;
  }
  static std::size_t offset_of(const Problem& p) {
    const auto first = std::find_if(p.source.begin(), p.source.end(), [](std::int64_t t) { return t != kPad; });
    return static_cast<std::size_t>(first - p.source.begin());
  }
  ToyTaskOptions o_;
};

// Majority: which symbol occurs most often in the sequence (ties: the smallest).
class MajorityTask : public SequenceTask {
 public:
  explicit MajorityTask(const ToyTaskOptions& o) : SequenceTask(o.held_out_fraction), o_(o) {}
  std::string name() const override { return "majority"; }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(kFirstSymbol) + o_.symbols; }
  std::size_t num_classes() const override { return o_.symbols; }
  std::vector<TaskFormat> formats() const override { return {TaskFormat::classification}; }
  Problem problem(Generator& gen) const override {
    Problem p;
    p.source = random_symbols(o_.length, o_.symbols, gen);
    std::vector<std::size_t> counts(o_.symbols, 0);
    for (std::int64_t t : p.source) ++counts[static_cast<std::size_t>(t - kFirstSymbol)];
    p.label = static_cast<std::int64_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
    return p;
  }

 protected:
  std::size_t source_length() const override { return o_.length; }
  std::size_t answer_length() const override { return 0; }

 private:
  ToyTaskOptions o_;
};

}  // namespace



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
                           "(raise length or symbols, or change held_out_fraction)");
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

PaddedRows pad_rows(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t fill) {
  std::size_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  std::vector<std::int64_t> ids(rows.size() * longest, fill);
  std::vector<bool> padding(rows.size() * longest, false);
  bool any = false;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    std::copy(rows[b].begin(), rows[b].end(), ids.begin() + static_cast<std::ptrdiff_t>(b * longest));
    for (std::size_t i = rows[b].size(); i < longest; ++i) padding[b * longest + i] = any = true;
  }
  PaddedRows out;
  out.ids = from_indices(ids, {rows.size(), longest});
  if (any) out.mask = from_mask(padding, {rows.size(), longest});
  return out;
}

std::vector<std::string> toy_task_names() { return {"copy", "induction", "majority", "mqar", "reverse", "sort"}; }

void check_toy_task(const ToyTaskOptions& o) {
  const auto n = [](std::size_t v) { return std::to_string(v); };
  if (o.length == 0 && o.name != "mqar") throw OptionError("length", "task.length must be at least 1");
  if (o.min_length > o.length) {
    throw OptionError("min_length", "task.min_length (" + n(o.min_length) + ") must not exceed task.length (" + n(o.length) +
                                        "): sources have min_length to length tokens");
  }
  if (o.symbols < 2) throw OptionError("symbols", "task.symbols must be at least 2, got " + n(o.symbols));
  if (!(o.held_out_fraction > 0.0 && o.held_out_fraction < 1.0)) {
    throw OptionError("held_out_fraction", "task.held_out_fraction must be in (0, 1), got " + std::to_string(o.held_out_fraction));
  }
  if (o.name == "induction" && o.gap > 0 && o.symbols < o.length) {
    throw OptionError("gap", "task.gap > 0 draws the segment's " + n(o.length) + " symbols without repeats: task.symbols (" +
                                     n(o.symbols) + ") must be at least task.length; raise task.symbols or set task.gap: 0");
  }
  if (o.name != "mqar") return;
  if (o.pairs == 0 || o.pairs > o.symbols) {
    throw OptionError("pairs", "task.pairs (" + n(o.pairs) + ") must be between 1 and task.symbols (" + n(o.symbols) +
                                       "): keys are distinct symbols");
  }
  const std::size_t queries = o.queries == 0 ? o.pairs : o.queries;
  if (o.sequence_length != 0 && queries > o.pairs) {
    throw OptionError("queries", "task.queries (" + n(queries) + ") must not exceed task.pairs (" + n(o.pairs) +
                                         ") when task.sequence_length is set: each key is queried once");
  }
  if (o.sequence_length != 0 && o.sequence_length < 2 * o.pairs + 2 * queries) {
    throw OptionError("sequence_length", "task.sequence_length (" + n(o.sequence_length) + ") is too short for " + n(o.pairs) +
                                                 " pairs and " + n(queries) + " queries: it needs at least 2 * pairs + 2 * queries = " +
                                                 n(2 * o.pairs + 2 * queries) + "; raise it or lower task.pairs");
  }
}

std::unique_ptr<SequenceTask> make_toy_task(const ToyTaskOptions& o) {
  check_toy_task(o);
  if (o.name == "copy") return std::make_unique<TransformTask>(TransformTask::Kind::copy, o);
  if (o.name == "reverse") return std::make_unique<TransformTask>(TransformTask::Kind::reverse, o);
  if (o.name == "sort") return std::make_unique<TransformTask>(TransformTask::Kind::sort, o);
  if (o.name == "induction") return std::make_unique<InductionTask>(o);
  if (o.name == "majority") return std::make_unique<MajorityTask>(o);
  if (o.name == "mqar") return std::make_unique<RecallTask>(o);
  std::string list;
  for (const auto& name : toy_task_names()) list += (list.empty() ? "" : ", ") + name;
  throw std::invalid_argument("task '" + o.name + "' is not among [" + list + "]");
}

SequenceMetrics sequence_metrics(const Tensor& logits, const Tensor& target) {
  const std::size_t classes = logits.size(-1);
  if (logits.numel() / std::max<std::size_t>(classes, 1) != target.numel()) {
    throw std::invalid_argument("sequence_metrics: logits " + shape_str(logits.shape()) + " do not match targets " +
                                shape_str(target.shape()));
  }
  const std::vector<double> scores = logits.to_vector(), t = target.to_vector();
  std::vector<double> p(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) {  // argmax, first maximum on ties
    const auto row = scores.begin() + static_cast<std::ptrdiff_t>(i * classes);
    p[i] = static_cast<double>(std::max_element(row, row + static_cast<std::ptrdiff_t>(classes)) - row);
  }
  const std::size_t rows = target.size(0), per_row = t.size() / std::max<std::size_t>(rows, 1);
  SequenceMetrics m;
  std::size_t correct = 0, exact = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    bool all = true;
    for (std::size_t i = r * per_row; i < (r + 1) * per_row; ++i) {
      if (t[i] == static_cast<double>(kIgnore)) continue;
      ++m.scored_tokens;
      if (p[i] == t[i]) {
        ++correct;
      } else {
        all = false;
      }
    }
    exact += all;
  }
  m.token_accuracy = m.scored_tokens ? static_cast<double>(correct) / static_cast<double>(m.scored_tokens) : 0.0;
  m.exact_match = rows ? static_cast<double>(exact) / static_cast<double>(rows) : 0.0;
  return m;
}

}  // namespace attnlab::data
