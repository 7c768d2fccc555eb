// Checkpoints round-trip every dtype and refuse truncated, corrupted or foreign files; a failed write
// leaves the previous checkpoint in place.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <map>

#include "framework/io/atomic_file.hpp"
#include "framework/io/checkpoint.hpp"
#include "framework/nn/layers.hpp"

namespace attnlab {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "attnlab_" + name; }

void write_all(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

TEST(Checkpoint, RoundTripsTensorsOfEveryDtypeAndTexts) {
  Checkpoint c;
  c.tensors["w"] = from_vector({1.5, -2.0, 3.25, 4.0}, {2, 2});
  c.tensors["d"] = from_vector({0.1}, {}, DType::float64);
  c.tensors["ids"] = from_indices({7, -3}, {2});
  c.tensors["mask"] = from_mask({true, false, true}, {3});
  c.texts["config"] = "name: x\nseed: 3\n";
  const std::string path = temp_path("roundtrip.ckpt");
  save_checkpoint(path, c);
  const Checkpoint back = load_checkpoint(path);
  ASSERT_EQ(back.tensors.size(), 4u);
  for (const auto& [name, t] : c.tensors) {
    EXPECT_EQ(back.tensors.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(back.tensors.at(name).dtype(), t.dtype()) << name;
    EXPECT_EQ(back.tensors.at(name).to_vector(), t.to_vector()) << name;
  }
  EXPECT_EQ(back.texts.at("config"), c.texts.at("config"));
  std::remove(path.c_str());
}

TEST(Checkpoint, RefusesTruncatedCorruptedAndForeignFiles) {
  Checkpoint c;
  c.tensors["w"] = from_vector({1, 2, 3}, {3});
  const std::string path = temp_path("bad.ckpt");
  save_checkpoint(path, c);
  const std::string good = read_file(path, "test file");
  auto error_for = [&](const std::string& bytes) {
    write_all(path, bytes);
    try {
      load_checkpoint(path);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_for(good.substr(0, good.size() - 5)).find("truncated"), std::string::npos);
  std::string flipped = good;
  flipped[30] ^= 0x40;
  EXPECT_NE(error_for(flipped).find("checksum"), std::string::npos);
  EXPECT_NE(error_for("hello, not a checkpoint").find("wrong magic"), std::string::npos);
  std::string future = good;
  future[8] = 9;
  EXPECT_NE(error_for(future).find("format version 9"), std::string::npos);
  EXPECT_THROW(load_checkpoint(temp_path("missing.ckpt")), std::runtime_error);
  // A shape that claims more than the file holds, with a checksum that agrees (a crafted file): refused
  // before anything is allocated, naming the tensor (found in review: "out of memory: a size in the config").
  const std::size_t header = good.size() - 8 - (4 + 4 + 1 + 1 + 4 + 8 + 12 + 4);  // what precedes the payload
  std::string huge = good.substr(0, good.size() - 8);
  const std::uint64_t rows = std::uint64_t(1) << 40;
  std::memcpy(&huge[header + 4 + 4 + 1 + 1 + 4], &rows, sizeof rows);
  std::uint64_t hash = 1469598103934665603ull;  // the writer's sum over the payload (FNV-1a's steps, its own start)
  for (std::size_t i = header; i < huge.size(); ++i) hash = (hash ^ static_cast<unsigned char>(huge[i])) * 1099511628211ull;
  huge.append(reinterpret_cast<const char*>(&hash), sizeof hash);
  EXPECT_NE(error_for(huge).find("is corrupted: w claims the shape [1099511627776], more than the 16 bytes left"), std::string::npos)
      << error_for(huge);
  std::remove(path.c_str());
}

TEST(Checkpoint, AFailedWriteLeavesThePreviousCheckpoint) {
  const std::string path = temp_path("keep.ckpt");
  Checkpoint c;
  c.tensors["w"] = from_vector({1}, {1});
  save_checkpoint(path, c);
  Checkpoint bad;
  bad.tensors["w"] = from_vector({2}, {1});
  EXPECT_THROW(save_checkpoint(temp_path("no/such/dir/keep.ckpt"), bad), std::runtime_error);
  EXPECT_EQ(load_checkpoint(path).tensors.at("w").item(), 1.0);
  std::remove(path.c_str());
}

TEST(Checkpoint, ModuleStateIncludesGeneratorsSoDropoutResumesExactly) {
  Generator g1(1);
  Dropout a(0.5, g1);
  const Tensor x = ones({64});
  a.forward(x);  // advance the mask stream
  Generator g2(99);
  Dropout b(0.5, g2);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(a.forward(x).to_vector(), b.forward(x).to_vector());
}

}  // namespace
}  // namespace attnlab

#include "framework/io/image.hpp"

namespace attnlab {
namespace {

TEST(PatternPng, WritesAGridOfHeadsPerLayer) {
  const std::string path = ::testing::TempDir() + "attnlab_pattern.png";
  Tensor p = zeros({2, 3, 4, 4});
  for (std::size_t i = 0; i < 4; ++i) p.data<float>()[i * 4 + i] = 1.0f;
  write_pattern_png(path, p);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  auto be32 = [&](std::size_t at) {
    return (static_cast<unsigned>(static_cast<unsigned char>(bytes[at])) << 24) |
           (static_cast<unsigned>(static_cast<unsigned char>(bytes[at + 1])) << 16) |
           (static_cast<unsigned>(static_cast<unsigned char>(bytes[at + 2])) << 8) | static_cast<unsigned char>(bytes[at + 3]);
  };
  // 4x4 patterns scaled by 24 px per cell: 3 heads across, 2 layers down, 4 px gaps.
  EXPECT_EQ(be32(16), 3u * 96 + 4 * 4);
  EXPECT_EQ(be32(20), 2u * 96 + 3 * 4);
  EXPECT_THROW(write_pattern_png(path, zeros({4, 4})), std::invalid_argument);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// Distributions keep the absolute [0, 1] viridis scale; signed mixing goes on the diverging scale of its
// largest magnitude (negative blue, zero white, positive red).
TEST(PatternPng, SignedPatternsUseTheDivergingScale) {
  const std::vector<double> weights{0.0, 0.5, 1.0, 0.25};
  PatternScale s = pattern_scale(weights.data(), weights.size());
  EXPECT_FALSE(s.signed_values);
  EXPECT_EQ(s.magnitude, 1.0);
  const std::vector<double> mixing{-2.0, 0.0, 1.0, 0.5};
  s = pattern_scale(mixing.data(), mixing.size());
  EXPECT_TRUE(s.signed_values);
  EXPECT_EQ(s.magnitude, 2.0);
  unsigned char negative[3], zero[3], positive[3], want[3];
  pattern_colour(-2.0, s, negative);
  pattern_colour(0.0, s, zero);
  pattern_colour(2.0, s, positive);
  diverging(-1.0, want);
  EXPECT_EQ(std::vector<int>(negative, negative + 3), std::vector<int>(want, want + 3));
  diverging(0.0, want);
  EXPECT_EQ(std::vector<int>(zero, zero + 3), std::vector<int>(want, want + 3));
  diverging(1.0, want);
  EXPECT_EQ(std::vector<int>(positive, positive + 3), std::vector<int>(want, want + 3));
}

}  // namespace
}  // namespace attnlab
