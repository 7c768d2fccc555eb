// The attnlab command: `train`, `compare`, `report`, `eval`, `sample`, `export`, `list`, `gradcheck`,
// `bench gpt`, `bench attention`.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "experiments/bench/bench_attention.hpp"
#include "experiments/bench/bench_gpt.hpp"
#include "experiments/inspect.hpp"
#include "experiments/runner/compare.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/train.hpp"
#include "framework/io/config_node.hpp"
#include "framework/ops/blas.hpp"

int main(int argc, char** argv) {
  attnlab::reexec_with_blas_core(argv);
  CLI::App app{"attnlab: train mini transformers and compare attention mechanisms"};
  app.require_subcommand(1);

  std::vector<std::string> train_args;
  std::string resume_dir;
  int train_threads = 1;
  CLI::App* train_cmd = app.add_subcommand(
      "train", "train the experiment a YAML config describes (CONFIG [key=value ...]), or --resume RUN [key=value ...]");
  train_cmd->add_option("args", train_args, "the experiment's YAML file, then key=value overrides (e.g. model.attention.name=linear)");
  train_cmd->add_option("--resume", resume_dir, "continue the run in this folder from its last.ckpt")->check(CLI::ExistingDirectory);
  train_cmd->add_option("--threads", train_threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();

  std::string eval_run, eval_checkpoint = "best";
  CLI::App* eval_cmd = app.add_subcommand("eval", "held-out loss and metrics of a run's checkpoint, as one JSON line");
  eval_cmd->add_option("run", eval_run, "the run folder")->required()->check(CLI::ExistingDirectory);
  eval_cmd->add_option("--checkpoint", eval_checkpoint, "best or last")->capture_default_str();

  std::string sample_run_dir;
  attnlab::SampleOptions sample;
  CLI::App* sample_cmd = app.add_subcommand("sample", "continue a prompt with a causal LM run's model");
  sample_cmd->add_option("run", sample_run_dir, "the run folder")->required()->check(CLI::ExistingDirectory);
  sample_cmd->add_option("--prompt", sample.prompt, "text (character-level runs) or space-separated token ids");
  sample_cmd->add_option("--tokens", sample.tokens, "tokens to generate")->capture_default_str();
  sample_cmd->add_option("--temperature", sample.temperature, "0 picks the most likely token")->check(CLI::NonNegativeNumber)->capture_default_str();
  sample_cmd->add_option("--top-k", sample.top_k, "sample among the k most likely tokens; 0: all")->capture_default_str();
  sample_cmd->add_option("--seed", sample.seed, "sampling seed")->capture_default_str();
  sample_cmd->add_option("--checkpoint", sample.checkpoint, "best or last")->capture_default_str();

  std::string export_run_dir, export_dir, export_checkpoint = "best";
  CLI::App* export_cmd = app.add_subcommand("export", "a run's weights as .npy files named by parameter, with index.json");
  export_cmd->add_option("run", export_run_dir, "the run folder")->required()->check(CLI::ExistingDirectory);
  export_cmd->add_option("dir", export_dir, "the folder to write")->required();
  export_cmd->add_option("--checkpoint", export_checkpoint, "best or last")->capture_default_str();

  std::vector<std::string> compare_args;
  attnlab::CompareOptions compare;
  CLI::App* compare_cmd = app.add_subcommand(
      "compare", "train every variant x seed of a comparison file (CONFIG [key=value ...]); the same command resumes it");
  compare_cmd->add_option("args", compare_args, "the comparison's YAML file, then key=value overrides for every run")->required();
  compare_cmd->add_option("--jobs", compare.jobs, "runs at a time")->check(CLI::Range(1, 64))->capture_default_str();
  compare_cmd->add_option("--threads", compare.threads, "threads per run; 0: the cores divided among the jobs")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();

  std::string report_dir;
  CLI::App* report_cmd = app.add_subcommand("report", "(re)write a run folder's report.html");
  report_cmd->add_option("run", report_dir, "the run folder")->required()->check(CLI::ExistingDirectory);

  CLI::App* list_cmd = app.add_subcommand("list", "tasks, model kinds, and attention kernels with their capabilities and options");
  std::string check_kernel = "all";
  CLI::App* gradcheck_cmd = app.add_subcommand(
      "gradcheck", "float64 gradient check of attention kernels in every mode they support (all: and the modules)");
  gradcheck_cmd->add_option("--kernel", check_kernel, "a kernel name, or all")->capture_default_str();

  CLI::App* bench = app.add_subcommand("bench", "benchmarks against the PyTorch references in shared/bench");
  bench->require_subcommand(1);
  attnlab::bench::GptBenchOptions gpt;
  CLI::App* gpt_cmd = bench->add_subcommand("gpt", "train the reference GPT on random tokens; prints one JSON line");
  gpt_cmd->add_option("--layers", gpt.layers, "transformer blocks")->check(CLI::PositiveNumber)->capture_default_str();
  gpt_cmd->add_option("--heads", gpt.heads, "attention heads")->check(CLI::PositiveNumber)->capture_default_str();
  gpt_cmd->add_option("--dim", gpt.dim, "model width")->check(CLI::PositiveNumber)->capture_default_str();
  gpt_cmd->add_option("--block", gpt.block, "sequence length")->check(CLI::PositiveNumber)->capture_default_str();
  gpt_cmd->add_option("--batch", gpt.batch, "sequences per step")->check(CLI::PositiveNumber)->capture_default_str();
  gpt_cmd->add_option("--vocab", gpt.vocab, "vocabulary size")->check(CLI::PositiveNumber)->capture_default_str();
  gpt_cmd->add_option("--steps", gpt.steps, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  gpt_cmd->add_option("--warmup", gpt.warmup, "untimed steps first")->capture_default_str();
  gpt_cmd->add_option("--threads", gpt.threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();

  attnlab::bench::AttentionBenchOptions attention;
  CLI::App* attention_cmd = bench->add_subcommand(
      "attention", "forward + backward of attention kernels alone; one JSON line per (variant, length)");
  attention_cmd->add_option("--variants", attention.variants, "kernels (and 'causal'); default: all registered")
      ->delimiter(',');
  attention_cmd->add_option("--lengths", attention.lengths, "sequence lengths")->delimiter(',')->capture_default_str();
  attention_cmd->add_option("--batch", attention.batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  attention_cmd->add_option("--heads", attention.heads, "heads")->check(CLI::PositiveNumber)->capture_default_str();
  attention_cmd->add_option("--dhead", attention.dhead, "head dimension")->check(CLI::PositiveNumber)->capture_default_str();
  attention_cmd->add_option("--proj", attention.proj, "linformer projection length k")->check(CLI::PositiveNumber)->capture_default_str();
  attention_cmd->add_option("--threads", attention.threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  attention_cmd->add_option("--min-seconds", attention.min_seconds, "time each case at least this long")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train_cmd) {
      std::string config_path = resume_dir.empty() ? "" : resume_dir + "/config.yaml";
      std::vector<std::string> overrides = train_args;
      if (resume_dir.empty()) {
        if (train_args.empty() || train_args[0].find('=') != std::string::npos) {
          std::fprintf(stderr, "attnlab train: give a config file (attnlab train CONFIG [key=value ...]) or --resume RUN\n");
          return 2;
        }
        config_path = train_args[0];
        overrides.erase(overrides.begin());
      }
      attnlab::ExperimentConfig config;
      try {
        config = attnlab::load_config(config_path, overrides);
      } catch (const attnlab::ConfigError& e) {
        std::fprintf(stderr, "attnlab: config error: %s\n", e.what());
        return 2;
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "attnlab: config error in %s: %s\n", config_path.c_str(), e.what());
        return 2;
      }
      const attnlab::TrainResult result = attnlab::train_experiment(config, train_threads, resume_dir);
      return result.interrupted ? 130 : 0;
    }
    if (*compare_cmd) {
      if (compare_args[0].find('=') != std::string::npos) {
        std::fprintf(stderr, "attnlab compare: give a comparison file first (attnlab compare CONFIG [key=value ...])\n");
        return 2;
      }
      compare.overrides.assign(compare_args.begin() + 1, compare_args.end());
      try {
        return attnlab::run_comparison(compare_args[0], compare);
      } catch (const attnlab::ConfigError& e) {
        std::fprintf(stderr, "attnlab: config error: %s\n", e.what());
        return 2;
      }
    }
    if (*report_cmd) {
      attnlab::write_run_report(report_dir);
      std::printf("attnlab: wrote %s/report.html\n", report_dir.c_str());
      return 0;
    }
    if (*export_cmd) return attnlab::export_run(export_run_dir, export_checkpoint, export_dir);
    if (*eval_cmd) return attnlab::evaluate_run(eval_run, eval_checkpoint, 1);
    if (*sample_cmd) return attnlab::sample_run(sample_run_dir, sample, 1);
    if (*list_cmd) return attnlab::list_kernels();
    if (*gradcheck_cmd) return attnlab::gradcheck_kernels(check_kernel);
    if (*gpt_cmd) return attnlab::bench::run_gpt_bench(gpt);
    if (*attention_cmd) return attnlab::bench::run_attention_bench(attention);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: %s\n", e.what());
    return 2;
  }
  return 0;
}
