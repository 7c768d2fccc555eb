#include "experiments/runner/run_commands.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "datasets/char_text.hpp"
#include "experiments/runner/evaluation.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/npy.hpp"
#include "framework/models/text_models.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

void load_model(Model& model, const LoadedRun& run) {
  try {
    model.load_state_dict(checkpoint_part(run.checkpoint, "model."));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(run.dir + "/" + run.checkpoint_file + " does not fit the model of its config: " + e.what());
  }
}

// A number for JSON, null when not finite.
nlohmann::ordered_json number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); }

}  // namespace

int evaluate_run(const std::string& run_dir, const std::string& which, int threads) {
  set_num_threads(threads);
  const LoadedRun run = load_run(run_dir, which);
  Experiment x(run.config);
  load_model(*x.model, run);
  const Evaluation e = evaluate(*x.model, *x.data, run.config.train.final_eval_batches, run.config.train.batch_size, run.config.seed + 2);
  const nlohmann::ordered_json line{{"run", run_dir},
                                    {"checkpoint", run.checkpoint_file.substr(0, run.checkpoint_file.find('.'))},
                                    {"step", run.state.step},
                                    {"loss", number(e.loss)},
                                    {"token_accuracy", number(e.metrics.token_accuracy)},
                                    {"exact_match", number(e.metrics.exact_match)},
                                    {"scored_tokens", e.metrics.scored_tokens}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

int export_run(const std::string& run_dir, const std::string& which, const std::string& out_dir) {
  const LoadedRun run = load_run(run_dir, which);
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : checkpoint_part(run.checkpoint, "model."))
    if (is_floating(t.dtype())) weights.emplace(name, t);
  export_npy_folder(out_dir, weights, config_to_yaml(run.config));
  std::printf("attnlab: %zu tensors of %s (%s) written to %s\n", weights.size(), run_dir.c_str(), run.checkpoint_file.c_str(),
              out_dir.c_str());
  return 0;
}

int sample_run(const std::string& run_dir, const SampleOptions& o, int threads) {
  set_num_threads(threads);
  const LoadedRun run = load_run(run_dir, o.checkpoint);
  if (run.config.model.kind != "causal_lm") {
    throw std::invalid_argument("attnlab sample needs a causal_lm run; " + run_dir + " trained a " + run.config.model.kind);
  }
  // The model alone: its vocabulary comes from the checkpoint (a text run's characters), not from the data.
  const std::string chars = run.checkpoint.texts.count("vocabulary") ? run.checkpoint.texts.at("vocabulary") : "";
  DataShape shape = data_shape(run.config);
  if (!chars.empty()) shape.vocab_size = shape.num_classes = chars.size();
  Generator init(run.config.seed);
  CausalLM model(run.config.model, shape, init);
  load_model(model, run);
  std::vector<std::int64_t> prompt;
  data::CharVocabulary vocabulary;
  if (!chars.empty()) {
    vocabulary = data::CharVocabulary::from_chars(chars);
    prompt = vocabulary.encode(o.prompt.empty() ? std::string(1, chars[0]) : o.prompt);
  } else {
    std::stringstream ss(o.prompt);
    for (std::int64_t id; ss >> id;) prompt.push_back(id);
    if (!ss.eof()) throw std::invalid_argument("--prompt '" + o.prompt + "': give token ids separated by spaces, e.g. \"2 3 4\"");
    if (prompt.empty()) prompt.push_back(data::kSep);
  }
  Generator gen(o.seed);
  const std::vector<std::int64_t> out = model.generate(prompt, o.tokens, o.temperature, o.top_k, gen);
  if (!chars.empty()) {
    std::printf("%s%s\n", o.prompt.c_str(), vocabulary.decode(out).c_str());
  } else {
    for (std::size_t i = 0; i < out.size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>(out[i]));
    std::printf("\n");
  }
  return 0;
}

}  // namespace attnlab
