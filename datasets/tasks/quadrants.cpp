// The quadrants task: which quadrant of a noisy image holds a bright square (synthetic, no files).
#include "datasets/tasks/image_source.hpp"

namespace attnlab::data {

class QuadrantsTask {
 public:
  static constexpr const char* kName = "quadrants";
  static constexpr const char* kDescription = "which quadrant of a noisy image holds a bright square (synthetic, no files)";
  struct Options {
    std::size_t image_size = 16;  // images are image_size x image_size
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("image_size", &Options::image_size, "images are this many pixels square (even)", Range::at_least(4));
    return s;
  }
  static void check(const Options& o, const ConfigNode& node) {
    if (o.image_size % 2 != 0) node.fail("image_size", "task.image_size must be even for quadrants, got " + std::to_string(o.image_size));
  }
  static std::vector<TaskFormat> layouts(const Options&) { return {TaskFormat::images}; }
  static DataShape data_shape(const Options& o, TaskFormat) { return ImageSource::shape_of(o.image_size, 4); }
  static std::unique_ptr<DataSource> source(const Options& o, TaskFormat) { return std::make_unique<ImageSource>(make_quadrant_task(o.image_size)); }
};
ATTNLAB_REGISTER_TASK(QuadrantsTask);

}  // namespace attnlab::data
