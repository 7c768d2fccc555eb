// .npy files: the bytes numpy writes, round trips of every dtype, and clear errors (naming the file) for
// truncated files, headers whose shape does not fit the data (checked before allocating), Fortran order
// and other dtypes; weights folders: index.json as JSON, and errors naming both files when an entry and
// its .npy disagree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "framework/io/atomic_file.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

void write_all(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A version 1.0 .npy file with header `dict` (padded as numpy pads it) followed by `data`.
std::string npy_file(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "attnlab_npy_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The message of the error read_npy throws for a file holding `bytes` ("" when it throws none).
  std::string error_for(const std::string& bytes) {
    const std::string path = dir_ + "/bad.npy";
    write_all(path, bytes);
    try {
      read_npy(path);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

// The bytes np.save writes for np.arange(6, dtype='<f4').reshape(2, 3), np.arange(3) and np.array(2.5).
TEST_F(Npy, WritesTheBytesNumpyWrites) {
  auto header = [](const std::string& dict) { return npy_file(dict, ""); };
  write_npy(dir_ + "/a.npy", from_vector({0, 1, 2, 3, 4, 5}, {2, 3}));
  const std::string a = read_file(dir_ + "/a.npy", "test file");
  ASSERT_EQ(a.size(), 128u + 24u);
  EXPECT_EQ(a.substr(0, 128), header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  const float five = 5.0f;
  EXPECT_EQ(a.substr(148), std::string(reinterpret_cast<const char*>(&five), 4));
  write_npy(dir_ + "/b.npy", from_indices({0, 1, 2}, {3}));
  EXPECT_EQ(read_file(dir_ + "/b.npy", "test file").substr(0, 128), header("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"));
  write_npy(dir_ + "/c.npy", scalar(2.5, DType::float64));
  EXPECT_EQ(read_file(dir_ + "/c.npy", "test file").substr(0, 128), header("{'descr': '<f8', 'fortran_order': False, 'shape': (), }"));
  EXPECT_THROW(write_npy(dir_ + "/d.npy", from_mask({true}, {1})), std::invalid_argument);
}

TEST_F(Npy, RoundTripsEveryDtypeAndEmptyAndScalarShapes) {
  const std::vector<Tensor> tensors{from_vector({1.5, -2, 3}, {3}), from_vector({0.25, 7, 8, 9}, {2, 1, 2}, DType::float64),
                                    from_indices({-4, 5}, {2}), scalar(3.5), zeros({0, 3})};
  for (const Tensor& t : tensors) {
    write_npy(dir_ + "/t.npy", t);
    const Tensor back = read_npy(dir_ + "/t.npy");
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(back.to_vector(), t.to_vector());
  }
}

TEST_F(Npy, ReadsVersion2Headers) {
  std::string file = npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", "");
  const std::string header = file.substr(10);
  const double values[2] = {1.0, -3.0};
  file = std::string("\x93NUMPY\x02\x00", 8) + static_cast<char>(header.size()) + std::string(3, '\0') + header +
         std::string(reinterpret_cast<const char*>(values), sizeof values);
  write_all(dir_ + "/v2.npy", file);
  EXPECT_EQ(read_npy(dir_ + "/v2.npy").to_vector(), (std::vector<double>{1.0, -3.0}));
}

TEST_F(Npy, ATruncatedFileIsAnErrorWithTheByteCounts) {
  write_npy(dir_ + "/a.npy", from_vector({0, 1, 2, 3, 4, 5}, {2, 3}));
  const std::string good = read_file(dir_ + "/a.npy", "test file");
  const std::string m = error_for(good.substr(0, good.size() - 4));
  EXPECT_NE(m.find(dir_ + "/bad.npy"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 24 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("holds 20"), std::string::npos) << m;
  EXPECT_NE(error_for(good + "xxxx").find("holds 28"), std::string::npos);  // longer than the shape says
  EXPECT_NE(error_for(good.substr(0, 60)).find("truncated"), std::string::npos);  // inside the header
}

// Before the check, such a header made the loader allocate 4e16 bytes (std::bad_alloc).
TEST_F(Npy, AHugeShapeIsRefusedBeforeAllocating) {
  const std::string m = error_for(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000), }", "12345678"));
  EXPECT_NE(m.find("[100000000000, 100000]"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 40000000000000000 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("holds 8"), std::string::npos) << m;
  const std::string overflow =
      error_for(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", ""));
  EXPECT_NE(overflow.find("more than 2^64"), std::string::npos) << overflow;
}

TEST_F(Npy, FortranOrderOtherDtypesAndForeignFilesAreRefused) {
  const std::string data(8, '\0');
  EXPECT_NE(error_for(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data)).find("np.ascontiguousarray"),
            std::string::npos);
  for (const char* descr : {"<i4", ">f4", "|b1", "<f2"}) {
    const std::string m = error_for(npy_file("{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (2,), }", data));
    EXPECT_NE(m.find(std::string("holds '") + descr + "' values"), std::string::npos) << m;
    EXPECT_NE(m.find("astype"), std::string::npos) << m;
  }
  EXPECT_NE(error_for("hello, not numpy").find("is not a .npy file"), std::string::npos);
  EXPECT_NE(error_for(npy_file("{'descr': '<f4', 'shape': (2,), }", data)).find("must all be present"), std::string::npos);
  EXPECT_NE(error_for(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data)).find("non-negative"), std::string::npos);
  std::string future = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data);
  future[6] = 9;
  EXPECT_NE(error_for(future).find("version 9.0"), std::string::npos);
  try {
    read_npy(dir_ + "/missing.npy");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/missing.npy"), std::string::npos) << e.what();
  }
}

// See AtomicFile.ReplacesTheFileInsteadOfRewritingIt: a hard link keeps the old bytes only if the new
// file was renamed into place.
TEST_F(Npy, WriteNpyReplacesTheFileAtomically) {
  const std::string path = dir_ + "/a.npy", link = dir_ + "/old.npy";
  write_npy(path, from_vector({1}, {1}));
  ASSERT_EQ(::link(path.c_str(), link.c_str()), 0);
  write_npy(path, from_vector({2, 3}, {2}));
  EXPECT_EQ(read_npy(link).to_vector(), (std::vector<double>{1}));
  EXPECT_EQ(read_npy(path).to_vector(), (std::vector<double>{2, 3}));
  EXPECT_FALSE(fs::exists(temporary_path(path)));
}

TEST_F(Npy, FolderExportsWeightsAndImportsThemBack) {
  std::map<std::string, Tensor> weights{{"blocks.0.attn.qkv.weight", from_vector({1, 2, 3, 4, 5, 6}, {2, 3})},
                                        {"bias", from_vector({0.25, -1.5}, {2}, DType::float64)},
                                        {"odd \"name\\", from_vector({1}, {1})},
                                        {"drop.rng", from_indices({1, 2, 3}, {3})}};
  export_npy_folder(dir_, weights, "name: \"x\"\n");
  const auto back = import_npy_folder(dir_);
  ASSERT_EQ(back.size(), 3u);  // the generator state is not a weight
  EXPECT_EQ(back.at("blocks.0.attn.qkv.weight").shape(), (Shape{2, 3}));
  EXPECT_EQ(back.at("blocks.0.attn.qkv.weight").to_vector(), weights.at("blocks.0.attn.qkv.weight").to_vector());
  EXPECT_EQ(back.at("bias").dtype(), DType::float64);
  EXPECT_EQ(back.at("bias").to_vector(), weights.at("bias").to_vector());
  EXPECT_EQ(back.at("odd \"name\\").to_vector(), (std::vector<double>{1}));

  const auto index = nlohmann::json::parse(read_file(dir_ + "/index.json", "test file"));
  EXPECT_EQ(index["format"], "attnlab weights 1");
  EXPECT_EQ(index["config"], "name: \"x\"\n");
  ASSERT_EQ(index["tensors"].size(), 3u);
  const auto& qkv = index["tensors"][1];
  EXPECT_EQ(qkv["name"], "blocks.0.attn.qkv.weight");
  EXPECT_EQ(qkv["file"], "blocks.0.attn.qkv.weight.npy");
  EXPECT_EQ(qkv["dtype"], "float32");
  EXPECT_EQ(qkv["shape"], nlohmann::json::array({2, 3}));
  for (const auto& entry : fs::directory_iterator(dir_)) EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
}

// A write that fails halfway (here the second file: a name with a folder that is not there) leaves
// nothing at the folder, and no half of it beside: it was written whole elsewhere first.
TEST_F(Npy, AFolderExportThatFailsLeavesNothing) {
  const std::string dir = dir_ + "/weights";
  EXPECT_THROW(export_npy_folder(dir, {{"a", from_vector({1, 2}, {2})}, {"z/b", from_vector({3}, {1})}}), std::runtime_error);
  EXPECT_FALSE(fs::exists(dir));
  for (const auto& entry : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << entry.path();
  // Into an empty folder that exists (one made for it, a link to one): written into it; a failure
  // leaves it empty.
  fs::create_directories(dir);
  EXPECT_THROW(export_npy_folder(dir, {{"a", from_vector({1, 2}, {2})}, {"z/b", from_vector({3}, {1})}}), std::runtime_error);
  EXPECT_TRUE(fs::is_empty(dir));
  fs::create_directory_symlink(dir, dir_ + "/link");
  export_npy_folder(dir_ + "/link/", {{"a", from_vector({1, 2}, {2})}});
  EXPECT_TRUE(fs::is_symlink(dir_ + "/link"));
  EXPECT_EQ(import_npy_folder(dir).at("a").to_vector(), (std::vector<double>{1, 2}));
  fs::remove_all(dir);
  // Into a folder that holds something already: refused, and it is left as it was.
  fs::create_directories(dir);
  write_file_atomically(dir + "/mine.txt", "x");
  EXPECT_THROW(export_npy_folder(dir, {{"a", from_vector({1, 2}, {2})}}), std::invalid_argument);
  EXPECT_EQ(read_file(dir + "/mine.txt", "test file"), "x");
  // An empty path, or a path under a file: errors that say so (found in review: "cannot move .tmp-PID
  // into place at  (rename)", and a raw filesystem_error).
  const auto error_for = [](const std::string& where) {
    try {
      export_npy_folder(where, {{"a", from_vector({1, 2}, {2})}});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_for(""), "the weights folder is an empty path; give a new or empty folder for the weights");
  EXPECT_EQ(error_for(dir + "/mine.txt/sub"), "cannot create the folder the weights go in, " + dir + "/mine.txt: Not a directory; choose a folder you can write");
}

TEST_F(Npy, FolderErrorsNameIndexJsonAndTheNpyFile) {
  export_npy_folder(dir_, {{"w", from_vector({1, 2, 3, 4, 5, 6}, {2, 3})}, {"b", from_vector({1, 2}, {2})}});
  const std::string index_path = dir_ + "/index.json", good = read_file(index_path, "test file");
  auto error = [&]() -> std::string {
    try {
      import_npy_folder(dir_);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  auto index = nlohmann::json::parse(good);

  write_npy(dir_ + "/w.npy", from_vector({1, 2, 3, 4, 5, 6}, {3, 2}));  // the entry says [2, 3]
  std::string m = error();
  EXPECT_NE(m.find(index_path + " lists w as float32 [2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find(dir_ + "/w.npy holds float32 [3, 2]"), std::string::npos) << m;
  write_npy(dir_ + "/w.npy", from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::float64));
  m = error();
  EXPECT_NE(m.find("holds float64 [2, 3]"), std::string::npos) << m;
  write_npy(dir_ + "/w.npy", from_vector({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(error(), "");

  write_all(index_path, good.substr(0, good.size() / 2));
  m = error();
  EXPECT_NE(m.find(index_path + " is not valid JSON"), std::string::npos) << m;
  auto broken = index;
  broken["tensors"][0].erase("file");
  write_all(index_path, broken.dump());
  m = error();
  EXPECT_NE(m.find(index_path + ": tensors[0] needs a string \"file\""), std::string::npos) << m;
  broken = index;
  broken["tensors"][0]["shape"] = {2, -1};
  write_all(index_path, broken.dump());
  EXPECT_NE(error().find("sizes are integers >= 0"), std::string::npos);
  broken = index;
  broken["format"] = "something else";
  write_all(index_path, broken.dump());
  EXPECT_NE(error().find("is not an attnlab weights index"), std::string::npos);
  broken = index;
  broken["tensors"][1] = broken["tensors"][0];
  write_all(index_path, broken.dump());
  EXPECT_NE(error().find("listed twice"), std::string::npos);
  broken = index;
  broken["tensors"][0]["file"] = "../w.npy";
  write_all(index_path, broken.dump());
  EXPECT_NE(error().find("must be a path inside the folder"), std::string::npos);

  write_all(index_path, good);
  fs::remove(dir_ + "/b.npy");
  m = error();
  EXPECT_NE(m.find(dir_ + "/b.npy, which is missing"), std::string::npos) << m;
  EXPECT_THROW(import_npy_folder(dir_ + "-missing"), std::runtime_error);
}

}  // namespace
}  // namespace attnlab
