// The sort task: sort a sequence of random symbols (with repeats) (the options and layouts shared with the others: transform_task.hpp).
#include "datasets/tasks/transform_task.hpp"

namespace attnlab::data {

class SortTask : public TransformTask, public ToyTaskRegistration<SortTask> {
 public:
  static constexpr const char* kName = "sort";
  static constexpr const char* kDescription = "sort a sequence of random symbols (with repeats)";
  using TransformTask::TransformTask;
  std::string name() const override { return kName; }

 protected:
  std::vector<std::int64_t> answer_of(std::vector<std::int64_t> source) const override {
    std::sort(source.begin(), source.end());
    return source;
  }
};
ATTNLAB_REGISTER_TASK(SortTask);

}  // namespace attnlab::data
