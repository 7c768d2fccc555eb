// Image classification data for ViT: IDX files (LeCun's MNIST format, gzipped or not; Fashion-MNIST
// comes as Debian's dataset-fashion-mnist in /usr/share/datasets/fashion-mnist/) and a synthetic task
// that needs no files: which quadrant of a noisy image holds a bright square.
//
// Legend: B batch, C channels, H x W image size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor/random.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab::data {

// The contents of an IDX file of unsigned bytes: its dimensions and values.
struct IdxArray {
  std::vector<std::size_t> dims;
  std::vector<std::uint8_t> data;
};
// Errors name the file and what is wrong: missing, bad magic, a type other than unsigned byte, truncated.
IdxArray read_idx(const std::string& path);
// Writes one (uncompressed), for tests and for users building their own data.
void write_idx(const std::string& path, const IdxArray& array);

struct ImageBatch {
  Tensor images;  // [B, C, H, W] float32 in [0, 1]
  Tensor labels;  // [B] int64
};

class ImageDataset {
 public:
  virtual ~ImageDataset() = default;
  virtual std::size_t channels() const = 0;
  virtual std::size_t height() const = 0;
  virtual std::size_t width() const = 0;
  virtual std::size_t num_classes() const = 0;
  // `size` random examples from the training or the held-out split.
  virtual ImageBatch batch(bool held_out, std::size_t size, Generator& gen) const = 0;
  // How many held-out examples there are: 0 when they are generated afresh (no finite split to walk).
  virtual std::size_t held_out_size() const { return 0; }
  // Held-out examples [first, first + count) in file order (evaluation over the whole split).
  virtual ImageBatch held_out_examples(std::size_t first, std::size_t count) const;
};

// Random changes to training images (never to held-out ones), drawn from the batch's generator.
struct ImageAugment {
  bool flip = false;      // mirror left-right with probability 1/2
  std::size_t shift = 0;  // move by up to this many pixels along each axis, filling with 0
                          // (torchvision's RandomCrop(size, padding=shift))
};

// train-images-idx3-ubyte(.gz), train-labels-idx1-ubyte(.gz), t10k-images-idx3-ubyte(.gz),
// t10k-labels-idx1-ubyte(.gz) in `dir`; the t10k files are the held-out split. Images keep the files'
// H x W (one channel). Errors name the file: counts of images and labels must agree, both splits must
// have one image size, and every label must be below `num_classes` (Fashion-MNIST's 10 by default),
// which num_classes() then reports.
std::unique_ptr<ImageDataset> load_idx_dataset(const std::string& dir, const ImageAugment& augment = {}, std::size_t num_classes = 10);
// "" when `dir` is a folder holding the four IDX files; else what is wrong (no such folder, a file, the
// files missing), for the task's config check.
std::string idx_folder_problem(const std::string& dir);
// "" when both image files of the IDX folder `dir` (idx_folder_problem's) hold images of side x side
// pixels, read from their headers alone; else what they hold, for a task whose model is sized before
// the files are read (fashion_mnist: 28).
std::string idx_image_size_problem(const std::string& dir, std::size_t side);

// Noise images (values up to 0.3) with a bright square (0.8 to 1.0) in one quadrant; the label is the
// quadrant (0 top left, 1 top right, 2 bottom left, 3 bottom right). Every batch is drawn from `gen`;
// the held-out split uses a separate stream (it cannot memorise: each image is new).
std::unique_ptr<ImageDataset> make_quadrant_task(std::size_t size);

}  // namespace attnlab::data
