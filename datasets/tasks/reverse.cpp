// The reverse task: reverse a sequence of random symbols (the options and layouts shared with the others: transform_task.hpp).
#include "datasets/tasks/transform_task.hpp"

namespace attnlab::data {

class ReverseTask : public TransformTask, public ToyTaskRegistration<ReverseTask> {
 public:
  static constexpr const char* kName = "reverse";
  static constexpr const char* kDescription = "reverse a sequence of random symbols";
  using TransformTask::TransformTask;
  std::string name() const override { return kName; }

 protected:
  std::vector<std::int64_t> answer_of(std::vector<std::int64_t> source) const override {
    std::reverse(source.begin(), source.end());
    return source;
  }
};
ATTNLAB_REGISTER_TASK(ReverseTask);

}  // namespace attnlab::data
