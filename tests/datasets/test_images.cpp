// Image data: IDX files plain and gzipped, the errors for broken ones, walking the held-out split,
// augmentation of training images, and the quadrant task's labels.
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "datasets/images.hpp"

namespace attnlab::data {
namespace {

namespace fs = std::filesystem;

class Images : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "attnlab_idx_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

IdxArray images(std::size_t n, std::size_t side) {
  IdxArray a{{n, side, side}, {}};
  for (std::size_t i = 0; i < n * side * side; ++i) a.data.push_back(static_cast<std::uint8_t>(i % 256));
  return a;
}

void write_gz(const std::string& path, const IdxArray& a) {
  const std::string plain = path + ".plain";
  write_idx(plain, a);
  std::ifstream in(plain, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gzFile out = gzopen(path.c_str(), "wb");
  gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(out);
  fs::remove(plain);
}

TEST_F(Images, IdxRoundTripsPlainAndGzipped) {
  const IdxArray a = images(3, 4);
  write_idx(dir_ + "/a.idx", a);
  write_gz(dir_ + "/a.idx.gz", a);
  for (const char* f : {"/a.idx", "/a.idx.gz"}) {
    const IdxArray b = read_idx(dir_ + f);
    EXPECT_EQ(b.dims, a.dims) << f;
    EXPECT_EQ(b.data, a.data) << f;
  }
}

TEST_F(Images, BrokenIdxFilesAreClearErrors) {
  auto error_for = [&](const std::string& bytes) {
    std::ofstream(dir_ + "/bad", std::ios::binary) << bytes;
    try {
      read_idx(dir_ + "/bad");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_for("PK\x03\x04 not idx").find("bad magic"), std::string::npos);
  EXPECT_NE(error_for(std::string("\0\0\x0d\x01\0\0\0\x01", 8)).find("type 0x0d is not supported"), std::string::npos);
  // dimensions whose product overflows 64 bits: the header still disagrees with the data
  EXPECT_NE(error_for(std::string("\0\0\x08\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 17)).find("header says more than 2^64"),
            std::string::npos);
  EXPECT_NE(error_for(std::string("\0\0\x08\x01\0\0\0\x05\x01\x02", 10)).find("truncated"), std::string::npos);
  EXPECT_THROW(read_idx(dir_ + "/missing"), std::runtime_error);
}

TEST_F(Images, AnIdxFolderIsADatasetAndMismatchesAreErrors) {
  write_idx(dir_ + "/train-images-idx3-ubyte", images(5, 6));
  write_idx(dir_ + "/train-labels-idx1-ubyte", IdxArray{{5}, {0, 1, 2, 1, 0}});
  write_gz(dir_ + "/t10k-images-idx3-ubyte.gz", images(2, 6));
  write_idx(dir_ + "/t10k-labels-idx1-ubyte", IdxArray{{2}, {2, 0}});
  EXPECT_EQ(load_idx_dataset(dir_)->num_classes(), 10u);  // Fashion-MNIST's, whatever labels occur
  const auto d = load_idx_dataset(dir_, {}, 3);
  EXPECT_EQ(d->num_classes(), 3u);
  EXPECT_EQ(d->height(), 6u);
  Generator gen(1);
  const ImageBatch b = d->batch(true, 4, gen);
  EXPECT_EQ(b.images.shape(), (Shape{4, 1, 6, 6}));
  for (double v : b.images.to_vector()) EXPECT_TRUE(v >= 0.0 && v <= 1.0);
  // The held-out split in file order, for evaluation over all of it.
  EXPECT_EQ(d->held_out_size(), 2u);
  const ImageBatch all = d->held_out_examples(0, 2);
  EXPECT_EQ(all.labels.to_vector(), (std::vector<double>{2, 0}));
  EXPECT_FLOAT_EQ(static_cast<float>(all.images.at({1, 0, 0, 0})), 36.0f / 255.0f);  // the second image's first pixel
  EXPECT_EQ(d->held_out_examples(1, 1).labels.to_vector(), (std::vector<double>{0}));
  EXPECT_THROW(d->held_out_examples(1, 2), std::invalid_argument);
  // Their size from the headers alone, gzip or not, for fashion_mnist's config check (its model is sized
  // 28x28 before the files are read; found in review: 10x10 files met a check about 28x28 ones).
  EXPECT_EQ(idx_image_size_problem(dir_, 6), "");
  EXPECT_EQ(idx_image_size_problem(dir_, 28), dir_ + "/train-images-idx3-ubyte holds 6x6 images, but this task reads 28x28 ones (Fashion-MNIST's, MNIST's)");
  write_idx(dir_ + "/t10k-labels-idx1-ubyte", IdxArray{{3}, {2, 0, 1}});
  EXPECT_THROW(load_idx_dataset(dir_), std::runtime_error);  // 2 images, 3 labels
  fs::remove(dir_ + "/train-labels-idx1-ubyte");
  EXPECT_THROW(load_idx_dataset(dir_), std::runtime_error);
}

class IdxErrors : public Images {
 protected:
  // A valid folder: 4 training and 2 held-out 6x6 images with labels below 10.
  void write_folder() {
    write_idx(dir_ + "/train-images-idx3-ubyte", images(4, 6));
    write_idx(dir_ + "/train-labels-idx1-ubyte", IdxArray{{4}, {0, 9, 3, 1}});
    write_idx(dir_ + "/t10k-images-idx3-ubyte", images(2, 6));
    write_idx(dir_ + "/t10k-labels-idx1-ubyte", IdxArray{{2}, {2, 0}});
  }
  std::string error(std::size_t num_classes = 10) {
    try {
      load_idx_dataset(dir_, {}, num_classes);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }
};

// Before, a label past the class count grew num_classes (the largest label + 1) in silence.
TEST_F(IdxErrors, ALabelPastTheClassCountNamesTheFileAndIndex) {
  write_folder();
  EXPECT_EQ(error(), "");
  write_idx(dir_ + "/train-labels-idx1-ubyte", IdxArray{{4}, {0, 9, 12, 200}});
  std::string m = error();
  EXPECT_NE(m.find(dir_ + "/train-labels-idx1-ubyte: label 12 at index 2 is not below the 10 classes"), std::string::npos) << m;
  write_folder();
  write_idx(dir_ + "/t10k-labels-idx1-ubyte", IdxArray{{2}, {2, 10}});
  m = error();
  EXPECT_NE(m.find(dir_ + "/t10k-labels-idx1-ubyte: label 10 at index 1"), std::string::npos) << m;
  write_folder();
  m = error(9);  // label 9 in training
  EXPECT_NE(m.find("train-labels-idx1-ubyte: label 9 at index 1 is not below the 9 classes"), std::string::npos) << m;
  EXPECT_THROW(load_idx_dataset(dir_, {}, 0), std::invalid_argument);
}

TEST_F(IdxErrors, CountAndSizeMismatchesNameBothFiles) {
  write_folder();
  write_idx(dir_ + "/train-labels-idx1-ubyte", IdxArray{{3}, {0, 1, 2}});
  std::string m = error();
  EXPECT_NE(m.find(dir_ + "/train-images-idx3-ubyte holds 4 images but " + dir_ + "/train-labels-idx1-ubyte holds 3 labels"),
            std::string::npos) << m;
  write_folder();
  write_idx(dir_ + "/t10k-images-idx3-ubyte", images(2, 5));
  m = error();
  EXPECT_NE(m.find("train-images-idx3-ubyte holds 6x6 images but " + dir_ + "/t10k-images-idx3-ubyte holds 5x5"), std::string::npos) << m;
  write_folder();
  write_idx(dir_ + "/t10k-images-idx3-ubyte", IdxArray{{2, 36}, std::vector<std::uint8_t>(72)});
  m = error();
  EXPECT_NE(m.find(dir_ + "/t10k-images-idx3-ubyte: images must be [N, H, W]"), std::string::npos) << m;
}

TEST_F(Images, AugmentationFlipsAndShiftsTrainingImagesOnly) {
  const IdxArray one = images(1, 6);  // pixel values 0..35, all distinct
  write_idx(dir_ + "/train-images-idx3-ubyte", one);
  write_idx(dir_ + "/train-labels-idx1-ubyte", IdxArray{{1}, {1}});
  write_idx(dir_ + "/t10k-images-idx3-ubyte", one);
  write_idx(dir_ + "/t10k-labels-idx1-ubyte", IdxArray{{1}, {0}});
  auto pixel = [&](std::int64_t y, std::int64_t x) {  // the original image, black outside
    return y < 0 || y >= 6 || x < 0 || x >= 6 ? 0.0 : one.data[static_cast<std::size_t>(y * 6 + x)] / 255.0;
  };
  // Which (flip, dy, dx) made image i of the batch, or -1s when none did.
  auto transform_of = [&](const ImageBatch& b, std::size_t i) {
    for (int flip = 0; flip < 2; ++flip)
      for (std::int64_t dy = -2; dy <= 2; ++dy)
        for (std::int64_t dx = -2; dx <= 2; ++dx) {
          bool same = true;
          for (std::int64_t y = 0; y < 6 && same; ++y)
            for (std::int64_t x = 0; x < 6 && same; ++x) {
              const std::int64_t sx = flip ? 5 - (x - dx) : x - dx;
              same = std::abs(b.images.at({i, 0, static_cast<std::size_t>(y), static_cast<std::size_t>(x)}) - pixel(y - dy, sx)) < 1e-6;
            }
          if (same) return std::array<std::int64_t, 3>{flip, dy, dx};
        }
    return std::array<std::int64_t, 3>{-1, -1, -1};
  };
  Generator gen(7);
  const auto flipped = load_idx_dataset(dir_, ImageAugment{true, 0});
  const ImageBatch f = flipped->batch(false, 32, gen);
  std::set<std::int64_t> flips;
  for (std::size_t i = 0; i < 32; ++i) {
    const auto t = transform_of(f, i);
    EXPECT_EQ(t[1], 0);
    EXPECT_EQ(t[2], 0);
    flips.insert(t[0]);
  }
  EXPECT_EQ(flips, (std::set<std::int64_t>{0, 1}));
  const auto shifted = load_idx_dataset(dir_, ImageAugment{false, 1});
  const ImageBatch sb = shifted->batch(false, 64, gen);
  std::set<std::pair<std::int64_t, std::int64_t>> moves;
  for (std::size_t i = 0; i < 64; ++i) {
    const auto t = transform_of(sb, i);
    EXPECT_EQ(t[0], 0);
    moves.insert({t[1], t[2]});
  }
  EXPECT_EQ(moves.size(), 9u);  // every move of up to one pixel along each axis
  const ImageBatch held_out = shifted->batch(true, 8, gen);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(transform_of(held_out, i), (std::array<std::int64_t, 3>{0, 0, 0}));
}

TEST(QuadrantTask, TheBrightSquareIsInTheLabelledQuadrant) {
  const auto task = make_quadrant_task(8);
  Generator gen(2);
  const ImageBatch b = task->batch(false, 64, gen);
  for (std::size_t i = 0; i < 64; ++i) {
    double best = -1;
    std::size_t at = 0;
    for (std::size_t y = 0; y < 8; ++y)
      for (std::size_t x = 0; x < 8; ++x)
        if (b.images.at({i, 0, y, x}) > best) best = b.images.at({i, 0, y, x}), at = (y / 4) * 2 + x / 4;
    EXPECT_EQ(static_cast<std::size_t>(b.labels.at({i})), at);
  }
  EXPECT_THROW(make_quadrant_task(7), std::invalid_argument);
  EXPECT_EQ(task->held_out_size(), 0u);  // generated afresh: no split to walk
  EXPECT_THROW(task->held_out_examples(0, 1), std::logic_error);
}

}  // namespace
}  // namespace attnlab::data
