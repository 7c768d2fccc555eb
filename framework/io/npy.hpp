// Weights as a folder of .npy files (numpy's format), one per named tensor, plus index.json listing
// names, files, shapes and dtypes (and the run's config), so that numpy and PyTorch users can read and
// write them:
//
//   {"format": "attnlab weights 1",
//    "tensors": [{"name": "blocks.0.attn.qkv.weight", "file": "blocks.0.attn.qkv.weight.npy",
//                 "dtype": "float32", "shape": [64, 192]}, ...],
//    "config": "<the run's config.yaml>"}      (optional)
//
// Every file is written atomically (framework/io/atomic_file.hpp).
#pragma once

#include <map>
#include <string>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

// One tensor as a .npy file (float32, float64 or int64; the bytes numpy's np.save writes).
void write_npy(const std::string& path, const Tensor& tensor);
// One .npy file (float32, float64 or int64, C order, format 1.0 to 3.0) as a tensor of that dtype. The
// header is checked before anything is allocated: errors name the file and what is wrong (not .npy,
// Fortran order, another dtype, or data shorter or longer than the header's shape needs).
Tensor read_npy(const std::string& path);

// Writes dir/<name>.npy for each float32 or float64 tensor (others, such as generator states, are
// skipped) and dir/index.json last; dir must not exist (it is then written whole beside its place and
// moved there) or be empty. A failure leaves nothing of the export. `config_yaml` is stored as "config"
// when non-empty.
// The refusal export_npy_folder gives for `dir` when it is a file or a folder that is not empty (a
// command checks it before its work, so that it fails at once).
void check_export_folder(const std::string& dir);
void export_npy_folder(const std::string& dir, const std::map<std::string, Tensor>& tensors, const std::string& config_yaml = "");
// Reads every tensor index.json lists. Errors name index.json and the .npy file: malformed JSON, a
// missing field or file, or a .npy whose dtype or shape disagrees with its entry.
std::map<std::string, Tensor> import_npy_folder(const std::string& dir);

}  // namespace attnlab
