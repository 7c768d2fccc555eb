// The mqar task: multi-query associative recall (Arora et al. 2023, Zoology).
#include <algorithm>
#include <cmath>

#include "datasets/toy_tasks.hpp"

namespace attnlab::data {

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
class RecallTask : public SequenceTask, public ToyTaskRegistration<RecallTask> {
 public:
  static constexpr const char* kName = "mqar";
  static constexpr const char* kDescription = "multi-query associative recall (Zoology)";
  struct Options : ToyOptions {
    std::size_t pairs = 4;            // key-value pairs
    std::size_t queries = 0;          // 0: one per pair
    std::size_t sequence_length = 0;  // Zoology's layout of this many input tokens; 0: the compact layout
    bool random_filler = true;        // Zoology's layout: random symbols between queries (false: PAD)
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    toy_fields(s, "distinct symbols, keys and values each");
    s.field("pairs", &Options::pairs, "key-value pairs (at most `symbols`)");
    s.field("queries", &Options::queries, "queries; 0 means one per pair");
    s.field("sequence_length", &Options::sequence_length,
            "Zoology's layout with this many input tokens: the pairs, SEP, then random symbols with each queried key (a distinct "
            "key each, queries <= pairs) at a power-law-drawn place, scored on its value, which the model never reads; needs at "
            "least 2 pairs + 2 queries. 0 means the compact layout (pairs, SEP, queries back to back, each value read back)");
    s.field("random_filler", &Options::random_filler,
            "with `sequence_length`: the tokens between queries are random key and value symbols (zoology's "
            "`random_non_queries`, its default); false makes them PAD, as zoology's Figure 2 configs do");
    return s;
  }
  static void check(const Options& o, const ConfigNode& node) {
    const auto n = [](std::size_t v) { return std::to_string(v); };
    if (o.pairs == 0 || o.pairs > o.symbols) {
      node.fail("pairs", "task.pairs (" + n(o.pairs) + ") must be between 1 and task.symbols (" + n(o.symbols) + "): keys are distinct symbols");
    }
    const std::size_t queries = o.queries == 0 ? o.pairs : o.queries;
    if (o.sequence_length != 0 && queries > o.pairs) {
      node.fail("queries", "task.queries (" + n(queries) + ") must not exceed task.pairs (" + n(o.pairs) +
                               ") when task.sequence_length is set: each key is queried once");
    }
    if (o.sequence_length != 0 && o.sequence_length < 2 * o.pairs + 2 * queries) {
      node.fail("sequence_length", "task.sequence_length (" + n(o.sequence_length) + ") is too short for " + n(o.pairs) + " pairs and " +
                                       n(queries) + " queries: it needs at least 2 * pairs + 2 * queries = " + n(2 * o.pairs + 2 * queries) +
                                       "; raise it or lower task.pairs");
    }
  }

  explicit RecallTask(const Options& o) : SequenceTask(o.held_out_fraction), o_(o) {
    if (o_.queries == 0) o_.queries = o_.pairs;
  }
  std::string name() const override { return kName; }
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
  Options o_;
};
ATTNLAB_REGISTER_TASK(RecallTask);

}  // namespace attnlab::data
