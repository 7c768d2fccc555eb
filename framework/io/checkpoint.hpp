// Checkpoints: named tensors and texts in one binary file, written atomically (a temporary file beside
// the target, flushed and synced, then renamed over it) so that a crash never leaves a half-written
// checkpoint in place, and read back only after its magic, version and checksum are verified.
//
// Layout: "ATNLCKPT", u32 version, u64 payload bytes, payload, u64 FNV-1a of the payload. The payload is
// u32 tensor count, then per tensor: u32 name length, name, u8 dtype, u32 rank, u64 dims..., raw data;
// then u32 text count and per text: u32 name length, name, u64 length, bytes. Little-endian.
#pragma once

#include <map>
#include <string>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> texts;
};

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Throws std::runtime_error naming the file and what is wrong (missing, not a checkpoint, another
// version, truncated, checksum mismatch).
Checkpoint load_checkpoint(const std::string& path);
// The same from a checkpoint file's bytes (read elsewhere, e.g. broadcast by rank 0); `path` names it in errors.
Checkpoint parse_checkpoint(const std::string& file, const std::string& path);

}  // namespace attnlab
