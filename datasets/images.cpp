#include "datasets/images.hpp"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace attnlab::data {
namespace {

namespace fs = std::filesystem;

std::uint32_t big_endian(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

// An IDX file as read, with its path for error messages.
struct IdxFile {
  std::string path;
  IdxArray array;
};

class IdxDataset : public ImageDataset {
 public:
  IdxDataset(IdxFile train_images, IdxFile train_labels, IdxFile test_images, IdxFile test_labels, std::size_t num_classes,
             const ImageAugment& augment)
      : classes_(num_classes), augment_(augment) {
    check_pair(train_images, train_labels, num_classes);
    check_pair(test_images, test_labels, num_classes);
    const auto& train_dims = train_images.array.dims;
    const auto& test_dims = test_images.array.dims;
    if (train_dims[1] != test_dims[1] || train_dims[2] != test_dims[2]) {
      throw std::runtime_error(train_images.path + " holds " + size_str(train_dims) + " images but " + test_images.path + " holds " +
                               size_str(test_dims) + " ones; both splits must come from the same data set");
    }
    height_ = train_dims[1];
    width_ = train_dims[2];
    split_[0] = {std::move(train_images.array), std::move(train_labels.array)};
    split_[1] = {std::move(test_images.array), std::move(test_labels.array)};
  }
  std::size_t channels() const override { return 1; }
  std::size_t height() const override { return height_; }
  std::size_t width() const override { return width_; }
  std::size_t num_classes() const override { return classes_; }
  ImageBatch batch(bool held_out, std::size_t size, Generator& gen) const override {
    const Split& s = split_[held_out ? 1 : 0];
    std::vector<std::size_t> picks(size);
    for (std::size_t& i : picks) i = gen.next_below(s.labels.data.size());
    ImageBatch b = gather(s, picks);
    if (!held_out && (augment_.flip || augment_.shift)) augment(b.images, gen);
    return b;
  }
  std::size_t held_out_size() const override { return split_[1].labels.data.size(); }
  ImageBatch held_out_examples(std::size_t first, std::size_t count) const override {
    if (count == 0 || first + count > held_out_size()) {
      throw std::invalid_argument("held-out examples [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                  ") are outside the " + std::to_string(held_out_size()) + " held-out images");
    }
    std::vector<std::size_t> picks(count);
    for (std::size_t b = 0; b < count; ++b) picks[b] = first + b;
    return gather(split_[1], picks);
  }

 private:
  struct Split {
    IdxArray images, labels;
  };
  // The examples `picks` of a split as a batch [B, 1, H, W] in [0, 1] and labels [B].
  ImageBatch gather(const Split& s, const std::vector<std::size_t>& picks) const {
    const std::size_t pixels = height_ * width_;
    Tensor images = empty({picks.size(), 1, height_, width_});
    std::vector<std::int64_t> labels(picks.size());
    float* out = images.data<float>();
    for (std::size_t b = 0; b < picks.size(); ++b) {
      const std::size_t i = picks[b];
      for (std::size_t p = 0; p < pixels; ++p) out[b * pixels + p] = static_cast<float>(s.images.data[i * pixels + p]) / 255.0f;
      labels[b] = s.labels.data[i];
    }
    return {images, from_indices(labels, {picks.size()})};
  }
  // Flips and shifts each image [B, 1, H, W] in place.
  void augment(Tensor& images, Generator& gen) const {
    const std::size_t h = height_, w = width_, count = images.size(0);
    const auto shift = static_cast<std::int64_t>(augment_.shift);
    std::vector<float> source(h * w);
    float* data = images.data<float>();
    for (std::size_t b = 0; b < count; ++b) {
      float* img = data + b * h * w;
      std::copy(img, img + h * w, source.begin());
      const bool flip = augment_.flip && gen.next_below(2) == 1;
      const std::int64_t dy = shift ? static_cast<std::int64_t>(gen.next_below(2 * augment_.shift + 1)) - shift : 0;
      const std::int64_t dx = shift ? static_cast<std::int64_t>(gen.next_below(2 * augment_.shift + 1)) - shift : 0;
      for (std::size_t y = 0; y < h; ++y) {
        for (std::size_t x = 0; x < w; ++x) {
          const std::int64_t sy = static_cast<std::int64_t>(y) - dy;
          const std::int64_t sx0 = static_cast<std::int64_t>(x) - dx;
          const std::int64_t sx = flip ? static_cast<std::int64_t>(w) - 1 - sx0 : sx0;
          const bool inside = sy >= 0 && sy < static_cast<std::int64_t>(h) && sx >= 0 && sx < static_cast<std::int64_t>(w);
          img[y * w + x] = inside ? source[static_cast<std::size_t>(sy) * w + static_cast<std::size_t>(sx)] : 0.0f;
        }
      }
    }
  }
  static std::string size_str(const std::vector<std::size_t>& dims) { return std::to_string(dims[1]) + "x" + std::to_string(dims[2]); }
  // Images [N, H, W] and labels [N] of one split: counts agree and every label is below num_classes.
  static void check_pair(const IdxFile& images, const IdxFile& labels, std::size_t num_classes) {
    const auto& image_dims = images.array.dims;
    const auto& label_dims = labels.array.dims;
    if (image_dims.size() != 3) {
      throw std::runtime_error(images.path + ": images must be [N, H, W] (an idx3 file), got " + std::to_string(image_dims.size()) + " dimensions");
    }
    if (label_dims.size() != 1) {
      throw std::runtime_error(labels.path + ": labels must be [N] (an idx1 file), got " + std::to_string(label_dims.size()) + " dimensions");
    }
    if (image_dims[0] != label_dims[0]) {
      throw std::runtime_error(images.path + " holds " + std::to_string(image_dims[0]) + " images but " + labels.path + " holds " +
                               std::to_string(label_dims[0]) + " labels; the two files of a split must come from the same data set");
    }
    if (image_dims[0] == 0) throw std::runtime_error(images.path + " holds no images");
    const auto& values = labels.array.data;
    const auto bad = std::find_if(values.begin(), values.end(), [&](std::uint8_t l) { return l >= num_classes; });
    if (bad != values.end()) {
      throw std::runtime_error(labels.path + ": label " + std::to_string(*bad) + " at index " + std::to_string(bad - values.begin()) +
                               " is not below the " + std::to_string(num_classes) + " classes expected (labels 0 to " +
                               std::to_string(num_classes - 1) + "); the file is damaged or from another data set");
    }
  }
  std::size_t height_ = 0, width_ = 0, classes_ = 0;
  ImageAugment augment_;
  Split split_[2];
};

class QuadrantTask : public ImageDataset {
 public:
  explicit QuadrantTask(std::size_t size) : size_(size) {
    if (size < 4 || size % 2 != 0) throw std::invalid_argument("task.image_size must be even and at least 4, got " + std::to_string(size));
  }
  std::size_t channels() const override { return 1; }
  std::size_t height() const override { return size_; }
  std::size_t width() const override { return size_; }
  std::size_t num_classes() const override { return 4; }
  ImageBatch batch(bool, std::size_t count, Generator& gen) const override {
    const std::size_t half = size_ / 2, square = std::max<std::size_t>(1, size_ / 4);
    Tensor images = empty({count, 1, size_, size_});
    std::vector<std::int64_t> labels(count);
    float* out = images.data<float>();
    for (std::size_t b = 0; b < count; ++b) {
      float* img = out + b * size_ * size_;
      for (std::size_t p = 0; p < size_ * size_; ++p) img[p] = static_cast<float>(0.3 * gen.next_double());
      const std::size_t quadrant = gen.next_below(4);
      const std::size_t top = (quadrant / 2) * half + gen.next_below(half - square + 1);
      const std::size_t left = (quadrant % 2) * half + gen.next_below(half - square + 1);
      for (std::size_t y = top; y < top + square; ++y)
        for (std::size_t x = left; x < left + square; ++x) img[y * size_ + x] = static_cast<float>(0.8 + 0.2 * gen.next_double());
      labels[b] = static_cast<std::int64_t>(quadrant);
    }
    return {images, from_indices(labels, {count})};
  }

 private:
  std::size_t size_;
};

}  // namespace

ImageBatch ImageDataset::held_out_examples(std::size_t, std::size_t) const {
  throw std::logic_error("this image task generates its held-out examples afresh; there is no split to walk");
}

IdxArray read_idx(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (!file) throw std::runtime_error("cannot read IDX file " + path);
  std::vector<unsigned char> bytes;
  unsigned char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) bytes.insert(bytes.end(), buffer, buffer + n);
  const bool failed = n < 0;
  gzclose(file);
  if (failed) throw std::runtime_error("IDX file " + path + " is corrupted (gzip error)");
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0) throw std::runtime_error(path + " is not an IDX file (bad magic number)");
  if (bytes[2] != 0x08) {
    const char* digits = "0123456789abcdef";
    const std::string type = {'0', 'x', digits[bytes[2] >> 4], digits[bytes[2] & 15]};
    throw std::runtime_error(path + ": IDX element type " + type + " is not supported (unsigned bytes, 0x08, are)");
  }
  IdxArray a;
  const std::size_t rank = bytes[3];
  if (bytes.size() < 4 + 4 * rank) throw std::runtime_error("IDX file " + path + " is truncated (in its header)");
  std::size_t count = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < rank; ++i) {
    a.dims.push_back(big_endian(bytes.data() + 4 + 4 * i));
    overflow |= a.dims.back() && count > std::numeric_limits<std::size_t>::max() / a.dims.back();
    count *= a.dims.back();
  }
  const std::size_t start = 4 + 4 * rank;
  if (overflow || bytes.size() - start != count) {
    throw std::runtime_error("IDX file " + path + " holds " + std::to_string(bytes.size() - start) + " values but its header says " +
                             (overflow ? "more than 2^64" : std::to_string(count)) +
                             (overflow || bytes.size() - start < count ? " (truncated)" : ""));
  }
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(start), bytes.end());
  return a;
}

void write_idx(const std::string& path, const IdxArray& a) {
  std::ofstream out(path, std::ios::binary);
  const unsigned char header[4] = {0, 0, 0x08, static_cast<unsigned char>(a.dims.size())};
  out.write(reinterpret_cast<const char*>(header), 4);
  for (std::size_t d : a.dims) {
    const unsigned char be[4] = {static_cast<unsigned char>(d >> 24), static_cast<unsigned char>(d >> 16), static_cast<unsigned char>(d >> 8),
                                 static_cast<unsigned char>(d)};
    out.write(reinterpret_cast<const char*>(be), 4);
  }
  out.write(reinterpret_cast<const char*>(a.data.data()), static_cast<std::streamsize>(a.data.size()));
}

namespace {

// The IDX files of an image folder, in the order they are read (each may be gzipped).
const std::vector<std::string>& idx_files() {
  static const std::vector<std::string> names{"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                              "t10k-labels-idx1-ubyte"};
  return names;
}

std::string present(const std::string& dir, const std::string& base) {
  for (const std::string& name : {base + ".gz", base})
    if (fs::is_regular_file(dir + "/" + name)) return dir + "/" + name;
  return "";
}

}  // namespace

std::string idx_folder_problem(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return dir + " does not exist";
  if (!fs::is_directory(dir, ec)) return dir + " is a file; give the folder that holds the four IDX files (as /usr/share/datasets/fashion-mnist)";
  std::string missing;
  for (const std::string& base : idx_files())
    if (present(dir, base).empty()) missing += (missing.empty() ? "" : ", ") + base + "(.gz)";
  if (missing.empty()) return "";
  return "no " + missing + " in " + dir +
         (dir.find("fashion-mnist") != std::string::npos ? "; install Debian's dataset-fashion-mnist (scripts/setup.sh does)" : "");
}

std::string idx_image_size_problem(const std::string& dir, std::size_t side) {
  for (const std::string& base : {idx_files()[0], idx_files()[2]}) {
    const std::string path = present(dir, base);
    if (path.empty()) continue;  // idx_folder_problem says so
    gzFile file = gzopen(path.c_str(), "rb");
    if (!file) return "cannot read " + path;
    unsigned char header[16] = {};
    const int n = gzread(file, header, sizeof header);
    gzclose(file);
    if (n < 16 || header[0] != 0 || header[1] != 0 || header[3] != 3) return path + " is not an IDX file of images (its header is not [count, height, width])";
    const std::size_t height = big_endian(header + 8), width = big_endian(header + 12);
    if (height != side || width != side) {
      return path + " holds " + std::to_string(height) + "x" + std::to_string(width) + " images, but this task reads " + std::to_string(side) +
             "x" + std::to_string(side) + " ones (Fashion-MNIST's, MNIST's)";
    }
  }
  return "";
}

std::unique_ptr<ImageDataset> load_idx_dataset(const std::string& dir, const ImageAugment& augment, std::size_t num_classes) {
  if (num_classes == 0) throw std::invalid_argument("load_idx_dataset: num_classes must be at least 1");
  if (const std::string problem = idx_folder_problem(dir); !problem.empty()) throw std::runtime_error(problem);
  std::vector<IdxFile> files;  // read one after another, in idx_files()' order
  for (const std::string& base : idx_files()) files.push_back(IdxFile{present(dir, base), read_idx(present(dir, base))});
  return std::make_unique<IdxDataset>(std::move(files[0]), std::move(files[1]), std::move(files[2]), std::move(files[3]), num_classes, augment);
}

std::unique_ptr<ImageDataset> make_quadrant_task(std::size_t size) { return std::make_unique<QuadrantTask>(size); }

}  // namespace attnlab::data
