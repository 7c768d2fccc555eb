// Image data: IDX files plain and gzipped, the errors for broken ones, and the quadrant task's labels.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

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
  EXPECT_NE(error_for(std::string("\0\0\x0d\x01\0\0\0\x01", 8)).find("not supported"), std::string::npos);
  EXPECT_NE(error_for(std::string("\0\0\x08\x01\0\0\0\x05\x01\x02", 10)).find("truncated"), std::string::npos);
  EXPECT_THROW(read_idx(dir_ + "/missing"), std::runtime_error);
}

TEST_F(Images, AnIdxFolderIsADatasetAndMismatchesAreErrors) {
  write_idx(dir_ + "/train-images-idx3-ubyte", images(5, 6));
  write_idx(dir_ + "/train-labels-idx1-ubyte", IdxArray{{5}, {0, 1, 2, 1, 0}});
  write_gz(dir_ + "/t10k-images-idx3-ubyte.gz", images(2, 6));
  write_idx(dir_ + "/t10k-labels-idx1-ubyte", IdxArray{{2}, {2, 0}});
  const auto d = load_idx_dataset(dir_);
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
  write_idx(dir_ + "/t10k-labels-idx1-ubyte", IdxArray{{3}, {2, 0, 1}});
  EXPECT_THROW(load_idx_dataset(dir_), std::runtime_error);  // 2 images, 3 labels
  fs::remove(dir_ + "/train-labels-idx1-ubyte");
  EXPECT_THROW(load_idx_dataset(dir_), std::runtime_error);
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
