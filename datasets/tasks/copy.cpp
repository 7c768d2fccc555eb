// The copy task: copy a sequence of random symbols (the options and layouts shared with the others: transform_task.hpp).
#include "datasets/tasks/transform_task.hpp"

namespace attnlab::data {

class CopyTask : public TransformTask, public ToyTaskRegistration<CopyTask> {
 public:
  static constexpr const char* kName = "copy";
  static constexpr const char* kDescription = "copy a sequence of random symbols";
  using TransformTask::TransformTask;
  std::string name() const override { return kName; }

 protected:
  std::vector<std::int64_t> answer_of(std::vector<std::int64_t> source) const override {
    return source;
  }
};
ATTNLAB_REGISTER_TASK(CopyTask);

}  // namespace attnlab::data
