// The `attnlab` Python module: runs, models, named activations and interventions, data, analyses and
// training, as numpy arrays. It binds the C++ the command line runs (experiments/runner, analysis) and
// re-implements nothing, so the two cannot disagree. docs/python.md walks through it.
//
//   import attnlab
//   run = attnlab.Run("runs/default")
//   model = run.model()                                   # the best checkpoint's weights
//   logits, cache = model.run_with_cache(tokens, ["blocks.*.attn.hook_pattern"])
//   logits = model.run_with_hooks(tokens, [("blocks.1.attn.hook_z", zero_head_2)])
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>


#include "experiments/python/bindings.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/config_node.hpp"
#include "framework/nn/hooks.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"

namespace py = pybind11;

PYBIND11_MODULE(attnlab, m) {
  using namespace attnlab;
  m.doc() = "attnlab: train mini transformers, compare attention mechanisms and look inside them (docs/python.md)";
  // Errors as Python's: a config error or a bad argument ValueError, an unknown activation KeyError
  // (listing the model's names), a missing file FileNotFoundError; messages as the command line's.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UnknownActivation& e) {
      PyErr_SetString(PyExc_KeyError, e.what());
    } catch (const ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, (std::string("config error: ") + e.what()).c_str());
    } catch (const FileMissing& e) {
      PyErr_SetString(PyExc_FileNotFoundError, e.what());
    }
  });
  // As the command line: OpenBLAS gets no threads of its own, attnlab's pool every core this process may use.
  set_blas_threads(1);
  set_num_threads(default_threads(0, 1));
  m.def("set_threads",
        [](int threads) {
          set_num_threads(default_threads(python::checked_threads(threads, "set_threads"), 1));
        },
        py::arg("threads"),
        "threads for attnlab's work (0: every core this process may use); results repeat bit for bit at the same count");
  m.def("threads", &num_threads, "threads attnlab's work runs on");
  m.def("blas_core", &blas_core_name, "the OpenBLAS kernels doing the products (summary.json's openblas_core)");
  m.def("command_line_blas_core", [] { const std::string better = better_blas_core(); return better.empty() ? blas_core_name() : better; },
        "the kernels the attnlab command uses on this CPU (OPENBLAS_CORETYPE for the same bits from Python)");
  // OpenBLAS picked its kernels when it loaded; the command line re-executes itself to correct a generic
  // choice, which an interpreter cannot: it says so, once, at import.
  if (const std::string better = better_blas_core(); !better.empty()) {
    PyErr_WarnEx(PyExc_RuntimeWarning,
                 ("OpenBLAS chose its " + blas_core_name() + " kernels on this CPU; attnlab's command line uses " + better +
                  ": start python with OPENBLAS_CORETYPE=" + better + " for their speed and the command line's bits")
                     .c_str(),
                 1);
  }
  python::bind_models(m);
  python::bind_runs(m);
}
