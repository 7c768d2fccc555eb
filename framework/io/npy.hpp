// Weights as a folder of .npy files (numpy's format), one per named tensor, plus index.json listing
// names, files, shapes and dtypes (and any extra fields the caller adds, such as the config), so that
// numpy and PyTorch users can read and write them.
#pragma once

#include <map>
#include <string>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

// One tensor as a .npy file (float32, float64 or int64).
void write_npy(const std::string& path, const Tensor& tensor);
// One .npy file (float32, float64 or int64, C order) as a tensor of that dtype. Errors name the file.
Tensor read_npy(const std::string& path);

// Writes dir/<name>.npy for each tensor (float32 or float64) and dir/index.json; creates dir.
// `extra_json` is added to the index verbatim as "config": <string> when non-empty.
void export_npy_folder(const std::string& dir, const std::map<std::string, Tensor>& tensors, const std::string& config_yaml = "");
// Reads every <name>.npy the index lists (float32 or float64). Errors name the file and what is wrong.
std::map<std::string, Tensor> import_npy_folder(const std::string& dir);

}  // namespace attnlab
