// `attnlab list` and `attnlab gradcheck`: what the registry holds, and whether its kernels' gradients
// are right.
#pragma once

#include <string>

namespace attnlab {

// Prints the tasks, the model kinds, and every registered attention kernel with its description,
// capabilities and options. Returns 0.
int list_registered();
// Prints the markdown table of every config key, section by section, each after the marker line that
// docs/configs.md holds before it ("<!-- config-keys: task -->"). Returns 0.
int list_config_keys();
// Runs the float64 gradient check of one kernel (or "all": every kernel, and the framework's modules)
// in every mode it supports; prints one line per check. Returns 0 when all pass, 1 when any fails, 2 for an unknown kernel.
int gradcheck_kernels(const std::string& name);

}  // namespace attnlab
