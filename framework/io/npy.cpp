#include "framework/io/npy.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

namespace attnlab {
namespace {

namespace fs = std::filesystem;

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out;
}

template <class T>
void dump(const std::string& path, const Tensor& t) {
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  const auto view = xt::adapt(t.data<T>(), t.numel(), xt::no_ownership(), shape);
  xt::dump_npy(path, view);
}

// The names listed in index.json ("name": "..."); the index is written by export_npy_folder.
std::vector<std::string> indexed_names(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) throw std::runtime_error("cannot read " + index_path + " (a weights folder holds index.json and one .npy per tensor)");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::vector<std::string> names;
  const std::string key = "\"name\": \"";
  for (std::size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + 1)) {
    const std::size_t start = at + key.size(), end = s.find('"', start);
    names.push_back(s.substr(start, end - start));
  }
  return names;
}

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  switch (t.dtype()) {
    case DType::float32: dump<float>(path, t); break;
    case DType::float64: dump<double>(path, t); break;
    case DType::int64: dump<std::int64_t>(path, t); break;
    default: throw std::invalid_argument("write_npy: " + std::string(dtype_name(t.dtype())) + " tensors are not written");
  }
}

void export_npy_folder(const std::string& dir, const std::map<std::string, Tensor>& tensors, const std::string& config_yaml) {
  fs::create_directories(dir);
  std::ostringstream index;
  index << "{\n  \"format\": \"attnlab weights 1\",\n  \"tensors\": [\n";
  bool first = true;
  for (const auto& [name, t] : tensors) {
    if (!is_floating(t.dtype())) continue;  // generator states and counters are not weights
    const std::string file = name + ".npy";
    write_npy(dir + "/" + file, t);
    index << (first ? "" : ",\n") << "    {\"name\": \"" << json_escape(name) << "\", \"file\": \"" << json_escape(file)
          << "\", \"dtype\": \"" << dtype_name(t.dtype()) << "\", \"shape\": [";
    for (std::size_t i = 0; i < t.dim(); ++i) index << (i ? ", " : "") << t.shape()[i];
    index << "]}";
    first = false;
  }
  index << "\n  ]";
  if (!config_yaml.empty()) index << ",\n  \"config\": \"" << json_escape(config_yaml) << "\"";
  index << "\n}\n";
  std::ofstream(dir + "/index.json") << index.str();
}

namespace {

// The .npy at `path` as a tensor of dtype `dtype`; xtensor's loader throws std::runtime_error when the
// stored dtype is another.
template <class T>
Tensor load_as(const std::string& path, DType dtype) {
  const auto a = xt::load_npy<T>(path);
  Tensor t = empty(Shape(a.shape().begin(), a.shape().end()), dtype);
  std::copy(a.begin(), a.end(), t.data<T>());
  return t;
}

}  // namespace

Tensor read_npy(const std::string& path) {
  if (!fs::exists(path)) throw std::runtime_error("cannot read " + path + ": no such file");
  // xtensor's loader checks the stored dtype against the one asked for; try the three we write.
  try {
    return load_as<float>(path, DType::float32);
  } catch (const std::runtime_error&) {
  }
  try {
    return load_as<double>(path, DType::float64);
  } catch (const std::runtime_error&) {
  }
  try {
    return load_as<std::int64_t>(path, DType::int64);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("cannot read " + path + " as a float32, float64 or int64 .npy: " + e.what());
  }
}

std::map<std::string, Tensor> import_npy_folder(const std::string& dir) {
  std::map<std::string, Tensor> out;
  for (const std::string& name : indexed_names(dir + "/index.json")) {
    const std::string path = dir + "/" + name + ".npy";
    if (!fs::exists(path)) throw std::runtime_error("weights folder " + dir + ": " + name + ".npy is listed in index.json but missing");
    Tensor t = read_npy(path);
    if (!is_floating(t.dtype())) throw std::runtime_error("weights folder " + dir + ": " + name + ".npy is not float32 or float64");
    out.emplace(name, t);
  }
  return out;
}

}  // namespace attnlab
