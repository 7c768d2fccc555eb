#include "experiments/runner/run_commands.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "datasets/char_text.hpp"
#include "datasets/toy_tasks.hpp"
#include "experiments/runner/evaluation.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/file_fields.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/npy.hpp"
#include "framework/io/text.hpp"
#include "framework/models/seq2seq.hpp"
#include "framework/models/text_models.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

// A piece of `sample`'s streamed text, written at once. SIGPIPE is ignored (main.cpp), so a reader that went
// away (`attnlab sample ... | head`) shows as a failed write, which ends the sampling.
void write_streamed(const std::string& text) {
  if (std::fputs(text.c_str(), stdout) == EOF || std::fflush(stdout) == EOF) {
    throw std::runtime_error(std::string("sample: the output could not be written (") + std::strerror(errno) + "); sampling stopped");
  }
}

// The model of a seq2seq run, or an error naming the command the run needs instead.
Seq2Seq& seq2seq_model(Experiment& x, const std::string& run_dir, const char* command) {
  auto* model = dynamic_cast<Seq2Seq*>(x.model.get());
  if (!model) {
    const bool generates = ModelRegistry::instance().find(x.config.model.kind.name).format == TaskFormat::causal_lm;
    throw std::invalid_argument(std::string("attnlab ") + command + " decodes with an encoder-decoder; " + run_dir + " trained a " +
                                x.config.model.kind.name + (generates ? " (use attnlab sample)" : ""));
  }
  return *model;
}

std::vector<Decoded> decode_batch(Seq2Seq& model, const Tensor& source, const Tensor& mask, const DecodeOptions& o) {
  if (o.max_length > model.target_positions()) {
    throw std::invalid_argument("--max-length " + std::to_string(o.max_length) + " exceeds the " + std::to_string(model.target_positions()) +
                                " target positions the model was built for; give at most that (0: all of them)");
  }
  return o.beam <= 1 ? model.greedy_decode(source, mask, o.max_length) : model.beam_decode(source, mask, o.beam, o.max_length, o.length_penalty);
}

// One held-out example as `eval --decode --show` prints it: source, decoded output and target, by name.
struct ShownExample {
  std::string input, output, target;
};

// The target row's tokens up to the end token (the target is padded with kIgnore).
std::vector<std::int64_t> target_row(const Tensor& target, std::size_t r) {
  const std::size_t length = target.size(1);
  const std::int64_t* t = target.data<std::int64_t>() + r * length;
  std::vector<std::int64_t> want;
  for (std::size_t i = 0; i < length && t[i] != data::kIgnore; ++i) want.push_back(t[i]);
  return want;
}

// Decoded exact match over the batches `evaluate` scores (the same draws, or the whole split in order),
// and the first `show` examples by name.
double decoded_exact_match(Seq2Seq& model, const data::DataSource& data, std::size_t batches, std::size_t batch_size,
                           std::uint64_t seed, const DecodeOptions& o, std::size_t show, std::vector<ShownExample>& shown) {
  std::size_t exact = 0, rows = 0;
  for_each_held_out_batch(data, batches, batch_size, seed, [&](const Batch& b) {
    const std::vector<Decoded> decoded = decode_batch(model, b.input, b.key_padding_mask, o);
    const std::size_t length = b.input.size(1);
    const std::int64_t* source = b.input.data<std::int64_t>();
    for (std::size_t r = 0; r < decoded.size(); ++r) {
      const std::vector<std::int64_t> want = target_row(b.target, r);
      exact += decoded[r].tokens == want;
      if (shown.size() == show) continue;
      std::string input;
      for (std::size_t i = 0; i < length && !data.is_padding(source[r * length + i]); ++i) {
        input += (input.empty() ? "" : " ") + data.token_label(source[r * length + i], i);
      }
      shown.push_back({input, data.decode_target(decoded[r].tokens), data.decode_target(want)});
    }
    rows += b.input.size(0);
  });
  return rows ? static_cast<double>(exact) / static_cast<double>(rows) : 0.0;
}

std::string decoding_name(const DecodeOptions& o) { return o.beam <= 1 ? "greedy" : "beam " + std::to_string(o.beam); }

}  // namespace

int evaluate_run(const std::string& run_dir, const std::string& which, int threads, const DecodeOptions* decode, std::size_t show) {
  set_num_threads(threads);
  const LoadedRun run = load_run(run_dir, which);
  Experiment x(run.config);
  load_run_model(*x.model, run, x.data.get());
  const TrainConfig& t = run.config.train;
  const Evaluation e = evaluate(*x.model, *x.data, t.final_eval_batches, t.batch_size, run.config.seed + 2);
  if (!std::isfinite(e.loss)) {
    std::fprintf(stderr, "attnlab: warning: the held-out loss of %s (%s, step %zu) is not finite: its weights give no usable outputs "
                         "(did the run diverge? its summary.json says)\n", run_dir.c_str(), run.checkpoint_file.c_str(), run.state.step);
  }
  nlohmann::ordered_json line{{"run", run_dir},
                              {"checkpoint", run.checkpoint_file.substr(0, run.checkpoint_file.find('.'))},
                              {"step", run.state.step},
                              {"loss", json_number(e.loss)},
                              {"token_accuracy", json_number(e.metrics.token_accuracy)},
                              {"exact_match", json_number(e.metrics.exact_match)},
                              {"scored_tokens", e.metrics.scored_tokens}};
  if (decode) {
    Seq2Seq& model = seq2seq_model(x, run_dir, "eval --decode");
    line["decoding"] = decoding_name(*decode);
    std::vector<ShownExample> shown;
    line["decoded_exact_match"] =
        json_number(decoded_exact_match(model, *x.data, t.final_eval_batches, t.batch_size, run.config.seed + 2, *decode, show, shown));
    if (show > 0) {
      line["examples"] = nlohmann::json::array();
      for (const ShownExample& e : shown) line["examples"].push_back({{"input", e.input}, {"output", e.output}, {"target", e.target}});
    }
  }
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

int translate_run(const std::string& run_dir, const TranslateOptions& o, int threads) {
  set_num_threads(threads);
  if (o.inputs.empty()) throw std::invalid_argument("attnlab translate: give at least one --input");
  const LoadedRun run = load_run(run_dir, o.checkpoint);
  Experiment x(run.config);
  Seq2Seq& model = seq2seq_model(x, run_dir, "translate");
  load_run_model(model, run, x.data.get());
  const std::size_t longest = x.data->shape().max_len;
  std::vector<std::vector<std::int64_t>> sources;
  for (const std::string& input : o.inputs) {
    try {
      sources.push_back(x.data->encode_source(input));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--input \"" + printable(input) + "\": " + e.what());
    }
    if (sources.back().size() > longest) {
      throw std::invalid_argument("--input \"" + printable(input) + "\" has " + std::to_string(sources.back().size()) + " tokens; the model reads at most " +
                                  std::to_string(longest));
    }
  }
  const data::PaddedRows batch = data::pad_rows(sources, data::kPad);
  const std::vector<Decoded> decoded = decode_batch(model, batch.ids, batch.mask, o.decode);
  for (std::size_t i = 0; i < decoded.size(); ++i) {
    std::printf("IN: %s OUT: %s\n", o.inputs[i].c_str(), x.data->decode_target(decoded[i].tokens).c_str());
  }
  return 0;
}

int export_run(const std::string& run_dir, const std::string& which, const std::string& out_dir) {
  check_export_folder(out_dir);  // before loading anything
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
  if (ModelRegistry::instance().find(run.config.model.kind.name).format != TaskFormat::causal_lm) {
    throw std::invalid_argument("attnlab sample needs a causal_lm run; " + run_dir + " trained a " + run.config.model.kind.name);
  }
  // The model alone: its vocabulary comes from the checkpoint (a text run's characters), not from the data.
  const std::string chars = run.checkpoint.texts.count("vocabulary") ? run.checkpoint.texts.at("vocabulary") : "";
  DataShape shape = data_shape(run.config);
  if (!chars.empty()) shape.vocab_size = shape.num_classes = chars.size();
  Generator init(run.config.seed);
  CausalLM model(run.config.model, shape, init);
  load_run_model(model, run, nullptr);  // the model alone: sample reads no data
  Generator gen(o.seed);
  if (!chars.empty()) {
    const data::CharVocabulary vocabulary = data::CharVocabulary::from_chars(chars);
    // An empty prompt starts from the vocabulary's first character (a newline for most texts, as nanoGPT's
    // sample.py starts), written as any prompt is: the output shows what the model continued.
    const std::string start = o.prompt.empty() ? std::string(1, chars[0]) : o.prompt;
    std::vector<std::int64_t> prompt;
    try {
      prompt = vocabulary.encode(start);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--prompt \"" + printable(o.prompt) + "\": " + e.what());
    }
    // Streamed: each character is written as it is picked, so a long sample shows from its start.
    write_streamed(start);
    model.generate(prompt, o.tokens, o.temperature, o.top_k, gen, Decoding::cached,
                   [&](std::int64_t id) { write_streamed(vocabulary.decode({id})); });
    write_streamed("\n");
    return 0;
  }
  // A task's tokens by their names ("sep 3 4"), read and printed by the task's own data source.
  const std::unique_ptr<data::DataSource> data = data::make_data_source(run.config.task, TaskFormat::causal_lm);
  std::vector<std::int64_t> prompt;
  try {
    prompt = data->token_ids(o.prompt);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--prompt \"" + printable(o.prompt) + "\": " + e.what());
  }
  // Padding is refused where the task masks it (the model would attend past it); where the task does not
  // (induction's and mqar's sequences hold pad as content), the model read it in training like any token.
  if (data->shape().padded) {
    for (std::int64_t id : prompt) {
      if (data->is_padding(id)) throw std::invalid_argument("--prompt \"" + printable(o.prompt) + "\": '" + data->token_label(id, 0) + "' is padding, which a prompt cannot hold");
    }
  }
  // The prompt, then its continuation, by name, each token written as it is picked; a token's name may
  // depend on its position (a task's labels do). An empty prompt starts from token 1 (the toy tasks'
  // separator), shown as the prompt would be.
  if (prompt.empty()) prompt.push_back(data::kSep);
  std::size_t position = 0, shown = 0;
  const auto show = [&](std::int64_t id) { write_streamed((shown++ ? " " : "") + data->token_label(id, position++)); };
  for (std::int64_t id : prompt) show(id);
  model.generate(prompt, o.tokens, o.temperature, o.top_k, gen, Decoding::cached, show);
  write_streamed("\n");
  return 0;
}

}  // namespace attnlab
