// The fashion_mnist task: Fashion-MNIST's 28x28 grey images in 10 classes, from IDX files (Debian's
// dataset-fashion-mnist by default).
#include "datasets/tasks/image_source.hpp"

namespace attnlab::data {

class FashionMnistTask {
 public:
  static constexpr const char* kDefaultFolder = "/usr/share/datasets/fashion-mnist";
  static constexpr const char* kName = "fashion_mnist";
  static constexpr const char* kDescription =
      "Fashion-MNIST, 28x28 grey images in 10 classes (IDX files; default /usr/share/datasets/fashion-mnist)";
  static constexpr bool kHeldOutSplit = true;
  static constexpr std::size_t kSide = 28;  // the model is sized by it before the files are read (check() reads their headers)
  struct Options {
    std::string path;  // the folder of IDX files; empty for kDefaultFolder
    ImageAugment augment;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("path", &Options::path,
            "the folder of IDX files, empty for /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)");
    s.field<bool>("flip", [](Options& o) -> bool& { return o.augment.flip; },
                  "mirror each training image left-right with probability 1/2 (held-out images are never changed)");
    s.field<std::size_t>("shift", [](Options& o) -> std::size_t& { return o.augment.shift; },
                         "move each training image by a random 0 to `shift` pixels up or down and left or right, filling with black: "
                         "torchvision's `RandomCrop(28, padding=shift)`",
                         Range::closed(0, 13));
    return s;
  }
  static void check(const Options& o, const ConfigNode& node) {
    if (const std::string problem = idx_folder_problem(folder(o)); !problem.empty()) node.fail("path", "task.path: " + problem);
    if (const std::string problem = idx_image_size_problem(folder(o), kSide); !problem.empty()) node.fail("path", "task.path: " + problem);
  }
  static std::vector<TaskFormat> layouts(const Options&) { return {TaskFormat::images}; }
  static DataShape data_shape(const Options&, TaskFormat) { return ImageSource::shape_of(kSide, 10); }
  static std::unique_ptr<DataSource> source(const Options& o, TaskFormat) {
    return std::make_unique<ImageSource>(load_idx_dataset(folder(o), o.augment));
  }

 private:
  static std::string folder(const Options& o) { return o.path.empty() ? kDefaultFolder : o.path; }
};
ATTNLAB_REGISTER_TASK(FashionMnistTask);

}  // namespace attnlab::data
