// An ImageDataset (datasets/images.hpp) as a DataSource: what the image tasks (quadrants.cpp,
// fashion_mnist.cpp) share.
#pragma once

#include <memory>

#include "datasets/images.hpp"
#include "datasets/source.hpp"

namespace attnlab::data {

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

}  // namespace attnlab::data
