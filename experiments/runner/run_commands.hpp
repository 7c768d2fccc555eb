// The commands that use a finished (or stopped) run: `attnlab eval`, `attnlab sample`, `attnlab translate`,
// `attnlab export`.
// Each loads the run through load_run (run_folder.hpp), so a config.yaml edited after training is caught
// before it builds another model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab {

// How a seq2seq run's outputs are decoded: greedy (beam 1) or beam search.
struct DecodeOptions {
  std::size_t beam = 1;
  std::size_t max_length = 0;    // 0: the longest target the model was built for
  double length_penalty = 1.0;   // beam search ranks by log-probability / length^length_penalty
};

// `attnlab eval RUN`: the held-out loss and metrics of a checkpoint ("best" or "last") over
// train.final_eval_batches (the whole split when 0), printed as one JSON line. With `decode` (seq2seq
// runs), also the exact match of decoded outputs over the same batches ("decoded_exact_match") and the
// first `show` of them by name ("examples": input, output, target as the task names their tokens).
// Returns the exit status.
int evaluate_run(const std::string& run_dir, const std::string& checkpoint, int threads, const DecodeOptions* decode = nullptr,
                 std::size_t show = 0);

struct TranslateOptions {
  std::vector<std::string> inputs;  // sources by their tokens' names: words (scan), symbols (toy tasks)
  DecodeOptions decode;
  std::string checkpoint = "best";
};
// `attnlab translate RUN --input "jump twice"`: decodes each input with a seq2seq run's model, in one
// batch, and prints "IN: <input> OUT: <output>" per input (SCAN's format).
int translate_run(const std::string& run_dir, const TranslateOptions& options, int threads);

struct SampleOptions {
  std::string prompt;  // text for char_text runs; the task's token names otherwise ("sep 3 4")
  std::size_t tokens = 200;
  double temperature = 1.0;
  std::size_t top_k = 0;
  std::uint64_t seed = 0;
  std::string checkpoint = "best";
};
// `attnlab sample RUN`: continues a prompt with a causal LM run's model and prints the continuation.
int sample_run(const std::string& run_dir, const SampleOptions& options, int threads);

// `attnlab export RUN DIR`: the weights (parameters and buffers) of a run's checkpoint as .npy files and
// index.json, with the config the checkpoint was trained with.
int export_run(const std::string& run_dir, const std::string& checkpoint, const std::string& out_dir);

}  // namespace attnlab
