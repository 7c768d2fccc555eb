// An analysis part of `attnlab analyze` (ablation, patching, ...) is an extension point like an attention
// kernel: one class states its name, what it does, its report heading, its place in the analysis and its
// options once, as static members, and one line at the bottom of its file registers it. The command's
// options (`--pairs`), the report's headings and `--only` all come from the registry (docs/extending.md).
//
//   class MyPart {
//    public:
//     static constexpr const char* kName = "my_part";                  // --only my_part; its tables' section
//     static constexpr const char* kDescription = "what it measures";  // attnlab analyze --help
//     static constexpr const char* kTitle = "My part: what it shows";  // the report's heading
//     static constexpr int kOrder = 80;                                // parts run and show in this order
//     struct Options { std::size_t samples = 16; };                    // a --samples option of the command
//     static Schema<Options> options_schema();
//     static void run(const PartInputs& p, const Options& options);  // adds tables, facts and notes
//   };
//   ATTNLAB_REGISTER_ANALYSIS(MyPart);
//
// Optional: `static std::string needs(const Model&, const data::DataSource&)`, "" when the part applies
// to a run and otherwise what it needs, said to the user ("image inputs (...)"): such a part is skipped
// with a note, or refused under --only; and `static void check_run(const Options&, const ExperimentConfig&)`,
// checks against the run made before any part starts (std::invalid_argument naming the option).
//
// A part's facts and notes begin with its name ("patching.clean_logit_diff", "patching: 64 pairs"), so
// that re-running one part with --only keeps the others' and replaces its own.
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "experiments/analysis/analysis.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/component.hpp"

namespace attnlab {

// What a part reads and writes.
struct PartInputs {
  const AnalysisInputs& in;  // the model (eval mode) and the held-out examples
  const LoadedRun& run;      // the run: its folder, config and seed
  const std::string& folder; // the analysis folder being written (for files beyond the tables: images)
  AnalysisResult& result;
};

// A part as the registry knows it, built from its class by analysis_part_info<P>().
struct AnalysisPartInfo {
  std::string name, description, title;
  int order = 0;
  OptionsSpec options;
  std::function<std::string(const Model&, const data::DataSource&)> needs;  // "" when it applies
  std::function<void(const ComponentOptions&, const ExperimentConfig&)> check_run;
  std::function<void(const PartInputs&, const ComponentOptions&)> run;
};

namespace analysis_detail {
template <class P, class = void>
struct has_needs : std::false_type {};
template <class P>
struct has_needs<P, std::void_t<decltype(P::needs(std::declval<const Model&>(), std::declval<const data::DataSource&>()))>>
    : std::true_type {};
template <class P, class = void>
struct has_check_run : std::false_type {};
template <class P>
struct has_check_run<P, std::void_t<decltype(P::check_run(std::declval<const typename P::Options&>(), std::declval<const ExperimentConfig&>()))>>
    : std::true_type {};
}  // namespace analysis_detail

template <class P>
AnalysisPartInfo analysis_part_info() {
  AnalysisPartInfo info;
  info.name = P::kName;
  info.description = P::kDescription;
  info.title = P::kTitle;
  info.order = P::kOrder;
  info.options = options_spec<P>();
  info.needs = [](const Model& model, const data::DataSource& data) {
    if constexpr (analysis_detail::has_needs<P>::value) return P::needs(model, data);
    return std::string();
  };
  info.check_run = [](const ComponentOptions& options, const ExperimentConfig& config) {
    if constexpr (analysis_detail::has_check_run<P>::value) P::check_run(read_options<P>(options), config);
  };
  info.run = [](const PartInputs& p, const ComponentOptions& options) { P::run(p, read_options<P>(options)); };
  return info;
}

// name -> AnalysisPartInfo ("analysis part 'x' is not among [...]").
using AnalysisRegistry = Registry<AnalysisPartInfo>;
template <>
AnalysisRegistry& AnalysisRegistry::instance();

// Every registered part, in their order (kOrder).
std::vector<const AnalysisPartInfo*> analysis_parts_in_order();

#define ATTNLAB_ANALYSIS_CONCAT_(a, b) a##b
#define ATTNLAB_ANALYSIS_CONCAT(a, b) ATTNLAB_ANALYSIS_CONCAT_(a, b)
#define ATTNLAB_REGISTER_ANALYSIS(Part)                                            \
  static const bool ATTNLAB_ANALYSIS_CONCAT(attnlab_analysis_registered_, Part) = \
      ::attnlab::AnalysisRegistry::instance().add(::attnlab::analysis_part_info<Part>())

}  // namespace attnlab
