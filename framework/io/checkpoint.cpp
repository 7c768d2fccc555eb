#include "framework/io/checkpoint.hpp"

#include <cstring>
#include <stdexcept>

#include "framework/io/atomic_file.hpp"

namespace attnlab {
namespace {

constexpr char kMagic[8] = {'A', 'T', 'N', 'L', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;

std::uint64_t fnv1a(const std::string& bytes) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void put_string(std::string& out, const std::string& s) {
  put<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Reads from the payload with bounds checks; every shortfall is "truncated".
class Reader {
 public:
  Reader(const std::string& data, const std::string& path) : data_(data), path_(path) {}
  template <class T>
  T get() {
    T value;
    need(sizeof value);
    std::memcpy(&value, data_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  std::string bytes(std::size_t n) {
    need(n);
    std::string s = data_.substr(at_, n);
    at_ += n;
    return s;
  }
  std::string text() { return bytes(get<std::uint32_t>()); }
  bool done() const { return at_ == data_.size(); }
  std::size_t left() const { return data_.size() - at_; }

 private:
  void need(std::size_t n) const {
    if (data_.size() - at_ < n) throw std::runtime_error("checkpoint " + path_ + " is truncated or corrupted (its contents end early)");
  }
  const std::string& data_;
  std::string path_;
  std::size_t at_ = 0;
};

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  std::string payload;
  put<std::uint32_t>(payload, static_cast<std::uint32_t>(checkpoint.tensors.size()));
  for (const auto& [name, tensor] : checkpoint.tensors) {
    put_string(payload, name);
    put<std::uint8_t>(payload, static_cast<std::uint8_t>(tensor.dtype()));
    put<std::uint32_t>(payload, static_cast<std::uint32_t>(tensor.dim()));
    for (std::size_t d : tensor.shape()) put<std::uint64_t>(payload, d);
    payload.append(static_cast<const char*>(tensor.storage()->data()), tensor.numel() * element_size(tensor.dtype()));
  }
  put<std::uint32_t>(payload, static_cast<std::uint32_t>(checkpoint.texts.size()));
  for (const auto& [name, text] : checkpoint.texts) {
    put_string(payload, name);
    put<std::uint64_t>(payload, text.size());
    payload.append(text);
  }
  std::string file(kMagic, sizeof kMagic);
  put<std::uint32_t>(file, kVersion);
  put<std::uint64_t>(file, payload.size());
  file += payload;
  put<std::uint64_t>(file, fnv1a(payload));

  write_file_atomically(path, file);
}

Checkpoint load_checkpoint(const std::string& path) { return parse_checkpoint(read_file(path, "checkpoint"), path); }

Checkpoint parse_checkpoint(const std::string& file, const std::string& path) {
  const std::size_t header = sizeof kMagic + sizeof(std::uint32_t) + sizeof(std::uint64_t);
  if (file.size() < sizeof kMagic || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    throw std::runtime_error(path + " is not an attnlab checkpoint (wrong magic)");
  }
  if (file.size() < header) throw std::runtime_error("checkpoint " + path + " is truncated (no header)");
  std::uint32_t version;
  std::uint64_t size;
  std::memcpy(&version, file.data() + sizeof kMagic, sizeof version);
  std::memcpy(&size, file.data() + sizeof kMagic + sizeof version, sizeof size);
  if (version != kVersion) {
    throw std::runtime_error("checkpoint " + path + " has format version " + std::to_string(version) + "; this attnlab reads version " +
                             std::to_string(kVersion));
  }
  if (file.size() != header + size + sizeof(std::uint64_t)) {
    throw std::runtime_error("checkpoint " + path + " is truncated or has trailing bytes (" + std::to_string(file.size()) +
                             " bytes, expected " + std::to_string(header + size + sizeof(std::uint64_t)) + ")");
  }
  const std::string payload = file.substr(header, size);
  std::uint64_t checksum;
  std::memcpy(&checksum, file.data() + header + size, sizeof checksum);
  if (checksum != fnv1a(payload)) throw std::runtime_error("checkpoint " + path + " is corrupted (checksum mismatch)");

  Reader r(payload, path);
  Checkpoint c;
  const auto tensors = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < tensors; ++i) {
    const std::string name = r.text();
    const auto dtype = static_cast<DType>(r.get<std::uint8_t>());
    if (static_cast<int>(dtype) > static_cast<int>(DType::boolean)) throw std::runtime_error("checkpoint " + path + ": bad dtype for " + name);
    const auto rank = r.get<std::uint32_t>();
    if (rank > r.left() / sizeof(std::uint64_t)) throw std::runtime_error("checkpoint " + path + " is corrupted: " + name + " claims " + std::to_string(rank) + " dimensions");
    Shape shape(rank);
    for (auto& d : shape) d = r.get<std::uint64_t>();
    // The size its shape claims, checked against the bytes there before anything is allocated.
    std::size_t count = element_size(dtype);
    bool fits = true;
    for (std::size_t d : shape) {
      fits = fits && (d == 0 || count <= r.left() / d);
      count = fits ? count * d : 0;
    }
    if (!fits || count > r.left()) {
      throw std::runtime_error("checkpoint " + path + " is corrupted: " + name + " claims the shape " + shape_str(shape) + ", more than the " +
                               std::to_string(r.left()) + " bytes left");
    }
    Tensor t = empty(shape, dtype);
    const std::string data = r.bytes(count);
    std::memcpy(t.storage()->data(), data.data(), data.size());
    c.tensors.emplace(name, t);
  }
  const auto texts = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < texts; ++i) {
    const std::string name = r.text();
    c.texts.emplace(name, r.bytes(r.get<std::uint64_t>()));
  }
  if (!r.done()) throw std::runtime_error("checkpoint " + path + " has unread bytes: corrupted");
  return c;
}

}  // namespace attnlab
