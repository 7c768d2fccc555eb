// .npy files (numpy's format, versions 1.0 to 3.0) read and written here without xtensor, so that a
// file's header is checked against its size before anything is allocated, and weights folders whose
// index.json is read and written with nlohmann-json.
//
// A .npy file: "\x93NUMPY", major and minor version bytes, the header's length (u16 in version 1.0, u32
// after), the header (a Python dict literal such as {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), } padded with spaces and ended by '\n' so that the data starts at a multiple of 64),
// then the data in C order.
#include "framework/io/npy.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "framework/io/atomic_file.hpp"
#include "framework/io/json_errors.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .npy code assumes a little-endian machine ('<' dtypes)");

namespace attnlab {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;

// The dtypes a .npy file may hold here, with numpy's name for each ("descr").
struct NpyType {
  DType dtype;
  const char* descr;
};
constexpr NpyType kNpyTypes[] = {{DType::float32, "<f4"}, {DType::float64, "<f8"}, {DType::int64, "<i8"}};

const char* descr_of(DType dtype) {
  for (const NpyType& t : kNpyTypes)
    if (t.dtype == dtype) return t.descr;
  throw std::invalid_argument("write_npy: " + std::string(dtype_name(dtype)) + " tensors are not written (float32, float64 and int64 are)");
}

// The header of a .npy file: what its data holds and where that data starts.
struct NpyHeader {
  DType dtype = DType::float32;
  Shape shape;
  std::size_t data_offset = 0;
};

// Reads the dict literal of a .npy header: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// Errors name the file and quote the header.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  NpyHeader parse() {
    std::string descr;
    bool fortran_order = false, has_descr = false, has_order = false, has_shape = false;
    NpyHeader header;
    expect('{');
    while (!consume('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        descr = quoted(), has_descr = true;
      } else if (key == "fortran_order") {
        fortran_order = boolean(), has_order = true;
      } else if (key == "shape") {
        header.shape = tuple(), has_shape = true;
      } else {
        fail("unknown key '" + key + "'");
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    if (!has_descr || !has_order || !has_shape) fail("'descr', 'fortran_order' and 'shape' must all be present");
    if (fortran_order) {
      throw std::runtime_error(path_ + " is stored in Fortran (column-major) order, which attnlab does not read; save it in C order: "
                                       "np.save(path, np.ascontiguousarray(a))");
    }
    header.dtype = dtype_of_descr(descr);
    return header;
  }

 private:
  DType dtype_of_descr(const std::string& descr) const {
    for (const NpyType& t : kNpyTypes)
      if (descr == t.descr) return t.dtype;
    throw std::runtime_error(path_ + " holds '" + descr +
                             "' values; attnlab reads float32 ('<f4'), float64 ('<f8') and int64 ('<i8'): convert it with numpy, "
                             "e.g. np.save(path, a.astype('<f4'))");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(path_ + " has a .npy header attnlab cannot read (" + what + "): " + text_ +
                             "; write the file with numpy's np.save");
  }
  void skip_spaces() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n')) ++at_;
  }
  bool consume(char c) {
    skip_spaces();
    if (at_ < text_.size() && text_[at_] == c) return ++at_, true;
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "' at character " + std::to_string(at_));
  }
  std::string quoted() {
    skip_spaces();
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"')) fail("expected a quoted string at character " + std::to_string(at_));
    const char quote = text_[at_++];
    const std::size_t end = text_.find(quote, at_);
    if (end == std::string::npos) fail("a string is not closed");
    std::string s = text_.substr(at_, end - at_);
    at_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_spaces();
    for (const auto& [word, value] : {std::pair<const char*, bool>{"True", true}, {"False", false}}) {
      if (text_.compare(at_, std::strlen(word), word) == 0) return at_ += std::strlen(word), value;
    }
    fail("'fortran_order' must be True or False");
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    while (!consume(')')) {
      skip_spaces();
      const std::size_t start = at_;
      std::size_t d = 0;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        const std::size_t digit = static_cast<std::size_t>(text_[at_++] - '0');
        if (d > (std::numeric_limits<std::size_t>::max() - digit) / 10) fail("a dimension is too large");
        d = d * 10 + digit;
      }
      if (at_ == start) fail("a dimension must be a non-negative integer");
      shape.push_back(d);
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  const std::string& text_;
  const std::string& path_;
  std::size_t at_ = 0;
};

std::uint32_t little_endian(const unsigned char* p, std::size_t bytes) {
  std::uint32_t v = 0;
  for (std::size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// Reads and checks the magic, version and header of the .npy file `in` (of `file_size` bytes).
NpyHeader read_header(std::istream& in, const std::string& path, std::uintmax_t file_size) {
  unsigned char preamble[12] = {};
  in.read(reinterpret_cast<char*>(preamble), 10);
  if (in.gcount() < 10 || std::memcmp(preamble, kMagic, kMagicSize) != 0) {
    throw std::runtime_error(path + " is not a .npy file (it does not start with \"\\x93NUMPY\"); write it with numpy's np.save");
  }
  const int major = preamble[6], minor = preamble[7];
  if (!((major == 1 || major == 2 || major == 3) && minor == 0)) {
    throw std::runtime_error(path + ": .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                             " is not supported (1.0, 2.0 and 3.0 are); save it again with numpy's np.save");
  }
  std::size_t length_bytes = major == 1 ? 2 : 4;
  if (length_bytes == 4) in.read(reinterpret_cast<char*>(preamble) + 10, 2);
  const std::size_t header_length = little_endian(preamble + 8, length_bytes);
  const std::size_t data_offset = 8 + length_bytes + header_length;
  if (!in || file_size < data_offset) {
    throw std::runtime_error(path + " is truncated: its header is " + std::to_string(data_offset) + " bytes long but the file has " +
                             std::to_string(file_size) + "; copy or write the file again");
  }
  std::string text(header_length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_length));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  NpyHeader header = HeaderParser(text, path).parse();
  header.data_offset = data_offset;
  return header;
}

// The header of a .npy file holding `t` (numpy's layout, so that np.save would write the same bytes).
std::string header_bytes(const Tensor& t) {
  std::string shape = "(";
  for (std::size_t i = 0; i < t.dim(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
  shape += t.dim() == 1 ? ",)" : ")";
  std::string dict = "{'descr': '" + std::string(descr_of(t.dtype())) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Padded with spaces and ended by '\n' so that the data starts at a multiple of 64, as numpy does.
  auto padding = [&](std::size_t preamble) { return (64 - (preamble + dict.size() + 1) % 64) % 64; };
  const bool long_header = dict.size() + 1 + padding(10) > std::numeric_limits<std::uint16_t>::max();  // version 2.0
  const std::size_t preamble = long_header ? 12 : 10;
  dict.append(padding(preamble), ' ');
  dict += '\n';
  std::string out(kMagic, kMagicSize);
  out += static_cast<char>(long_header ? 2 : 1);
  out += '\0';
  for (std::size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  return out + dict;
}

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  std::string bytes = header_bytes(t);
  bytes.append(static_cast<const char*>(t.storage()->data()), t.numel() * element_size(t.dtype()));
  write_file_atomically(path, bytes);
}

Tensor read_npy(const std::string& path) {
  std::error_code error;
  const std::uintmax_t file_size = fs::file_size(path, error);
  if (error == std::errc::no_such_file_or_directory) throw FileMissing("cannot read " + path + ": " + error.message());
  if (error) throw std::runtime_error("cannot read " + path + ": " + error.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  const NpyHeader header = read_header(in, path, file_size);

  // The data's size from the header, checked against the file before anything is allocated.
  const std::size_t item = element_size(header.dtype);
  std::size_t count = 1;
  bool overflow = false;
  for (std::size_t d : header.shape) {
    if (d && count > std::numeric_limits<std::size_t>::max() / d) overflow = true;
    count *= d;
  }
  overflow |= count > std::numeric_limits<std::size_t>::max() / item;
  const std::uintmax_t available = file_size - header.data_offset;
  if (overflow || count * item != available) {
    throw std::runtime_error(path + " is truncated or its header is wrong: the header's shape " + shape_str(header.shape) + " of " +
                             dtype_name(header.dtype) + " needs " + (overflow ? "more than 2^64" : std::to_string(count * item)) +
                             " bytes of data but the file holds " + std::to_string(available) +
                             " after its header; copy or write the file again");
  }
  Tensor t = empty(header.shape, header.dtype);
  in.read(static_cast<char*>(t.storage()->data()), static_cast<std::streamsize>(count * item));
  if (static_cast<std::size_t>(in.gcount()) != count * item) {
    throw std::runtime_error("cannot read " + path + ": it ended after " + std::to_string(in.gcount()) + " of " + std::to_string(count * item) +
                             " bytes of data (was it changed while being read?)");
  }
  return t;
}

// ---- weights folders ----
namespace {

constexpr char kIndexFormat[] = "attnlab weights 1";

// One row of index.json's "tensors".
struct IndexEntry {
  std::string name, file;
  DType dtype = DType::float32;
  Shape shape;
};

nlohmann::ordered_json entry_json(const IndexEntry& e) {
  return {{"name", e.name}, {"file", e.file}, {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}};
}

// Entry `i` of index.json, checked field by field; errors name the index file, the entry and the fix.
IndexEntry entry_from_json(const nlohmann::json& j, std::size_t i, const std::string& index_path) {
  const std::string where = index_path + ": tensors[" + std::to_string(i) + "]";
  auto text = [&](const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string()) {
      throw std::runtime_error(where + " needs a string \"" + key + "\" (each entry is {\"name\", \"file\", \"dtype\", \"shape\"})");
    }
    return j[key].get<std::string>();
  };
  IndexEntry e;
  e.name = text("name");
  e.file = text("file");
  const std::string dtype = text("dtype");
  if (dtype == "float32" || dtype == "float64") {
    e.dtype = dtype == "float32" ? DType::float32 : DType::float64;
  } else {
    throw std::runtime_error(where + " (" + e.name + ") has dtype \"" + dtype + "\"; weights are float32 or float64");
  }
  const fs::path file(e.file);
  if (e.file.empty() || file.is_absolute() || *file.lexically_normal().begin() == "..") {
    throw std::runtime_error(where + " (" + e.name + ") names the file \"" + e.file + "\"; it must be a path inside the folder");
  }
  if (!j.contains("shape") || !j["shape"].is_array()) throw std::runtime_error(where + " (" + e.name + ") needs a \"shape\" list of sizes");
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned()) throw std::runtime_error(where + " (" + e.name + ") has a shape entry " + d.dump() + "; sizes are integers >= 0");
    e.shape.push_back(d.get<std::size_t>());
  }
  return e;
}

// The entries of dir/index.json, after checking its format and that no name appears twice.
std::vector<IndexEntry> read_index(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) {
    const int error = errno;
    const std::string message = "cannot read " + index_path + " (a weights folder holds index.json and one .npy per tensor; "
                                "write one with `attnlab export RUN DIR`)";
    if (error == ENOENT || error == ENOTDIR) throw FileMissing(message);
    throw std::runtime_error(message);
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(index_path + " is not valid JSON: " + json_error_text(e) + "; export the weights again with `attnlab export RUN DIR`");
  }
  if (!index.is_object() || !index.contains("format") || index["format"] != kIndexFormat) {
    throw std::runtime_error(index_path + " is not an attnlab weights index: it needs \"format\": \"" + kIndexFormat + "\"" +
                             (index.is_object() && index.contains("format") ? " (it has " + index["format"].dump() + ")" : ""));
  }
  if (!index.contains("tensors") || !index["tensors"].is_array()) {
    throw std::runtime_error(index_path + " needs a \"tensors\" list of {\"name\", \"file\", \"dtype\", \"shape\"}");
  }
  std::vector<IndexEntry> entries;
  std::set<std::string> names;
  for (std::size_t i = 0; i < index["tensors"].size(); ++i) {
    entries.push_back(entry_from_json(index["tensors"][i], i, index_path));
    if (!names.insert(entries.back().name).second) {
      throw std::runtime_error(index_path + ": the tensor " + entries.back().name + " is listed twice; keep one entry per tensor");
    }
  }
  return entries;
}

}  // namespace

void check_export_folder(const std::string& dir) {
  // An earlier export's index.json, or a run's own files, were written over (or scattered among) without a word.
  std::error_code ec;
  if (dir.empty()) throw std::invalid_argument("the weights folder is an empty path; give a new or empty folder for the weights");
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec))) {
    throw std::invalid_argument(dir + (fs::is_directory(dir, ec) ? " is not empty" : " is a file") +
                                (fs::exists(dir + "/index.json", ec) ? " (it holds an earlier export)" : "") +
                                "; give a new or empty folder for the weights");
  }
}

void export_npy_folder(const std::string& dir, const std::map<std::string, Tensor>& tensors, const std::string& config_yaml) {
  check_export_folder(dir);
  std::string target = fs::path(dir).lexically_normal().string();
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  std::error_code ec;
  const bool exists = fs::exists(target, ec);
  // A new folder is written whole beside its place and moved there; an empty one that exists (made for
  // it: its permissions, a link to it, a mount) is written into, index.json last. Either way a failure
  // (a full disk) leaves nothing of the export behind.
  const std::string folder = exists ? target : temporary_path(target);
  if (!exists && fs::path(target).has_parent_path()) create_folders(fs::path(target).parent_path().string(), "the folder the weights go in,");
  std::vector<std::string> written;
  try {
    if (!exists) {
      fs::remove_all(folder, ec);  // a killed export's leftover; create_folders says what stands in the way
      create_folders(folder, "the weights folder");
    }
    nlohmann::ordered_json index = {{"format", kIndexFormat}, {"tensors", nlohmann::ordered_json::array()}};
    for (const auto& [name, t] : tensors) {
      if (!is_floating(t.dtype())) continue;  // generator states and counters are not weights
      const IndexEntry e{name, name + ".npy", t.dtype(), t.shape()};
      written.push_back(folder + "/" + e.file);
      write_npy(written.back(), t);
      index["tensors"].push_back(entry_json(e));
    }
    if (!config_yaml.empty()) index["config"] = config_yaml;
    write_file_atomically(folder + "/index.json", index.dump(2) + "\n");  // last: a folder with an index is complete
    if (!exists) replace_folder(folder, target);
  } catch (...) {
    if (exists) {
      for (const std::string& file : written) fs::remove(file, ec);
    } else {
      fs::remove_all(folder, ec);
    }
    throw;
  }
}

std::map<std::string, Tensor> import_npy_folder(const std::string& dir) {
  const std::string index_path = dir + "/index.json";
  std::map<std::string, Tensor> out;
  for (const IndexEntry& e : read_index(index_path)) {
    const std::string path = dir + "/" + e.file;
    if (!fs::exists(path)) throw std::runtime_error(index_path + " lists " + e.name + " in " + path + ", which is missing; export the folder again");
    Tensor t = read_npy(path);
    if (t.dtype() != e.dtype || t.shape() != e.shape) {
      throw std::runtime_error(index_path + " lists " + e.name + " as " + dtype_name(e.dtype) + " " + shape_str(e.shape) + " but " + path +
                               " holds " + dtype_name(t.dtype()) + " " + shape_str(t.shape()) +
                               "; export the folder again, or make index.json agree with the file");
    }
    out.emplace(e.name, t);
  }
  return out;
}

}  // namespace attnlab
