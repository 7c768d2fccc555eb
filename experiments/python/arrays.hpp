// Between attnlab's tensors and YAML and Python's numpy arrays and dicts, for the `attnlab` module.
//
// A tensor goes to Python without a copy: the array views the tensor's storage and keeps the tensor (a
// shared handle) alive for as long as the array lives. An array comes in as a copy, in the dtype asked
// for, and a wrong one is a ValueError naming the argument and what it should be.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <yaml-cpp/yaml.h>

#include <string>

#include "framework/tensor/tensor.hpp"

namespace attnlab::python {

namespace py = pybind11;

// A numpy view of `t` (float32, float64, int64 or bool), owning a handle to it.
py::array to_numpy(const Tensor& t);

// What an argument must be, for from_numpy.
enum class Want { tokens, images, floating, integers, mask };
// `value` (any array-like) as a tensor: token ids as int64 [B, T] (integers only), images as float32
// [B, C, H, W], a padding mask as bool [B, T], floating values as float32 or float64 of any shape (kept
// as given), integers as int64 of any shape. `what` names the argument in errors.
Tensor from_numpy(const py::handle& value, Want want, const std::string& what);

// A YAML document as Python (mappings as dicts, sequences as lists, scalars as bool, int, float or str
// when they read as one), and Python values as YAML (for configs given as dicts).
py::object to_python(const YAML::Node& node);
YAML::Node to_yaml(const py::handle& value, const std::string& what);

}  // namespace attnlab::python
