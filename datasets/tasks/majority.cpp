// The majority task: which symbol occurs most often in a sequence (ties: the smallest), one label per
// sequence (model.kind: sequence_classifier).
#include "datasets/toy_tasks.hpp"

namespace attnlab::data {

class MajorityTask : public SequenceTask, public ToyTaskRegistration<MajorityTask> {
 public:
  static constexpr const char* kName = "majority";
  static constexpr const char* kDescription = "the most frequent symbol of a sequence (one label)";
  struct Options : ToyOptions {
    std::size_t length = 8;  // symbols in a sequence
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("length", &Options::length, "symbols in a sequence", Range::at_least(1));
    toy_fields(s, "distinct symbols, each a class");
    return s;
  }

  explicit MajorityTask(const Options& o) : SequenceTask(o.held_out_fraction), o_(o) {}
  std::string name() const override { return kName; }
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
  Options o_;
};
ATTNLAB_REGISTER_TASK(MajorityTask);

}  // namespace attnlab::data
