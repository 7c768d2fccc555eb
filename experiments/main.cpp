// The attnlab command: `train`, `compare`, `report`, `eval`, `sample`, `translate`, `export`, `analyze`, `list`, `gradcheck`,
// `bench gpt`, `bench attention`, `bench generate`. Exit status: 0 done, 1 a run diverged or a check failed, 2 bad input
// (config errors say file:line:column or the override), 130 / 143 / 138 stopped by SIGINT / SIGTERM /
// SIGUSR1 after writing a checkpoint.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/analysis/part.hpp"
#include "experiments/bench/bench_attention.hpp"
#include "experiments/bench/bench_generate.hpp"
#include "experiments/bench/bench_gpt.hpp"
#include "experiments/cli_numbers.hpp"
#include "experiments/inspect.hpp"
#include "experiments/runner/compare.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/run_commands.hpp"
#include "experiments/runner/stop_signals.hpp"
#include "experiments/runner/train.hpp"
#include "framework/distributed/communicator.hpp"
#include "framework/io/config_node.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"

namespace {

namespace cli = attnlab::cli;
using attnlab::Range;

// Every command's options, filled by CLI11.
struct Commands {
  CLI::App* train = nullptr;
  std::vector<std::string> train_args;
  std::string resume_dir;
  int threads = 0;  // --threads of whichever command runs; 0: resolve_threads picks

  CLI::App* eval = nullptr;
  std::string eval_run, eval_checkpoint = "best";
  bool eval_decode = false;
  std::size_t eval_show = 0;
  attnlab::DecodeOptions eval_decoding;

  CLI::App* translate = nullptr;
  std::string translate_run;
  attnlab::TranslateOptions translate_options;

  CLI::App* sample = nullptr;
  std::string sample_run;
  attnlab::SampleOptions sample_options;

  CLI::App* export_ = nullptr;
  std::string export_run, export_dir, export_checkpoint = "best";

  CLI::App* analyze = nullptr;
  std::string analyze_run;
  attnlab::AnalyzeOptions analyze_options;
  // Each analysis part's options as its flags give them: the values, and which flag set each (for errors).
  struct PartFlags {
    YAML::Node values{YAML::NodeType::Map};
    std::shared_ptr<attnlab::ConfigSource> source = std::make_shared<attnlab::ConfigSource>();
  };
  std::map<std::string, PartFlags> part_flags;
  std::map<std::string, std::string> switch_texts;  // what CLI11 read for each switch (add_part_options)

  CLI::App* compare = nullptr;
  std::vector<std::string> compare_args;
  attnlab::CompareOptions compare_options;

  CLI::App* report = nullptr;
  std::string report_dir;

  CLI::App* list = nullptr;
  bool config_keys = false;
  CLI::App* gradcheck = nullptr;
  std::string check_kernel = "all";

  CLI::App* gpt = nullptr;
  attnlab::bench::GptBenchOptions gpt_options;
  CLI::App* attention = nullptr;
  attnlab::bench::AttentionBenchOptions attention_options;
  CLI::App* generate = nullptr;
  attnlab::bench::GenerateBenchOptions generate_options;
};

// --threads, the same for every command. The default, 0, is every core this process may use (as
// PyTorch does), divided among the ranks on this machine under mpirun: resolve_threads.
void add_threads_option(CLI::App* command, int& threads) {
  cli::add_number(command, "--threads", threads,
                  "threads; 0: every core this process may use (" + std::to_string(attnlab::available_cores()) +
                      " here), divided among the ranks on this machine under mpirun",
                  Range::closed(0, attnlab::kMaxThreads));
}

// --length-penalty ranks beam search's finished outputs; greedy decoding has none to rank.
void check_decode_options(const CLI::App* command, const attnlab::DecodeOptions& d) {
  if (command->count("--length-penalty") && d.beam <= 1) {
    throw std::invalid_argument("--length-penalty ranks the outputs of beam search, and greedy decoding (--beam 1) has none to rank; "
                                "give --beam 2 or more, or drop it");
  }
}

int resolve_threads(int requested) {
  return attnlab::default_threads(requested, attnlab::dist::Communicator::world().local_size());
}

void add_decode_options(CLI::App* command, attnlab::DecodeOptions& d) {
  cli::add_number(command, "--beam", d.beam, "beam width; 1 decodes greedily", Range::closed(1, 1024));
  cli::add_number(command, "--max-length", d.max_length, "at most this many output tokens; 0: the longest target the model was built for");
  cli::add_number(command, "--length-penalty", d.length_penalty, "beam search ranks finished outputs by log-probability / length^this",
                  Range::at_least(0));
}

// One flag per option of each analysis part, from the part's schema (experiments/analysis/part.hpp):
// patching's `pairs` is --pairs, rollout's `discard_ratio` --discard-ratio. A value is checked by the
// part's schema as it is read; an error names the flag and exits 2, as every bad argument does.
void add_part_options(CLI::App* command, Commands& c) {
  for (const attnlab::AnalysisPartInfo* part : attnlab::analysis_parts_in_order()) {
    for (const attnlab::KeyDoc& d : part->options.docs) {
      std::string flag = "--" + d.key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      const std::string name = part->name, key = d.key;
      const auto take = [&c, name, key, flag](const std::string& text) {
        Commands::PartFlags& f = c.part_flags[name];
        f.values[key] = text;
        f.source->add_override(f.values[key], flag + " " + text);
        attnlab::ComponentOptions& options = c.analyze_options.part_options[name];
        options = attnlab::ComponentOptions(f.values, "", f.source);
        try {
          attnlab::AnalysisRegistry::instance().find(name).options.check(options);
        } catch (const attnlab::ConfigError& e) {
          throw CLI::ValidationError(e.what());
        }
      };
      if (d.values == attnlab::kBooleanValues) {  // a switch: --exclude-bos alone turns it on, --exclude-bos=false off
        command->add_flag(flag, c.switch_texts[flag], name + ": " + d.doc + " (a switch; default " + d.default_text + ")")
            ->each(take);  // "true" alone; the schema reads what =X gives
        continue;
      }
      command->add_option_function<std::string>(flag, take, name + ": " + d.doc + " (" + d.values + ")")->type_name("")->default_str(d.default_text);
    }
  }
}

void add_analyze_command(CLI::App& app, Commands& c) {
  attnlab::AnalyzeOptions& o = c.analyze_options;
  std::string parts;
  for (const attnlab::AnalysisPartInfo* part : attnlab::analysis_parts_in_order()) parts += (parts.empty() ? "" : ", ") + part->name;
  c.analyze = app.add_subcommand("analyze", "which heads a run's model uses and for what: " + parts + " (writes RUN/analysis and the report)");
  c.analyze->add_option("run", c.analyze_run, "the run folder")->required()->check(CLI::ExistingDirectory);
  c.analyze->add_option("--checkpoint", o.checkpoint, "best (last when the run has no best) or last")->capture_default_str();
  c.analyze->add_option("--only", o.only, "the parts to run, comma-separated (default: all that apply): " + parts)->delimiter(',');
  cli::add_number(c.analyze, "--examples", o.examples,
                  "held-out examples analysed (each part forwards them once per head or layer it tries: 100000 take about 20 minutes for "
                  "the default experiment's model on one thread)",
                  Range::closed(1, static_cast<double>(attnlab::kMaxExamples)));
  add_part_options(c.analyze, c);
  add_threads_option(c.analyze, c.threads);
}

void add_run_commands(CLI::App& app, Commands& c) {
  c.train = app.add_subcommand("train", "train the experiment a YAML config describes (CONFIG [key=value ...]), or --resume RUN [key=value ...]");
  c.train->add_option("args", c.train_args, "the experiment's YAML file, then key=value overrides (e.g. model.attention.name=linear)");
  c.train->add_option("--resume", c.resume_dir, "continue the run in this folder from its last.ckpt")->check(CLI::ExistingDirectory);
  add_threads_option(c.train, c.threads);

  c.eval = app.add_subcommand("eval", "held-out loss and metrics of a run's checkpoint, as one JSON line");
  c.eval->add_option("run", c.eval_run, "the run folder")->required()->check(CLI::ExistingDirectory);
  c.eval->add_option("--checkpoint", c.eval_checkpoint, "best (last when the run has no best) or last")->capture_default_str();
  c.eval->add_flag("--decode", c.eval_decode, "seq2seq: also decode every example and report the exact match of the outputs (any decoding option below implies it)");
  add_decode_options(c.eval, c.eval_decoding);
  cli::add_number(c.eval, "--show", c.eval_show, "with --decode: print the first N decoded examples by name (input, output, target)");
  add_threads_option(c.eval, c.threads);

  c.translate = app.add_subcommand("translate", "decode inputs with a seq2seq run's model (greedy, or beam search with --beam)");
  c.translate->add_option("run", c.translate_run, "the run folder")->required()->check(CLI::ExistingDirectory);
  c.translate->add_option("--input", c.translate_options.inputs, "a source by its tokens' names: words (scan, e.g. \"jump twice\"), symbols (toy tasks, e.g. \"3 4 5\"); repeat it for more")
      ->required();
  add_decode_options(c.translate, c.translate_options.decode);
  c.translate->add_option("--checkpoint", c.translate_options.checkpoint, "best (last when the run has no best) or last")->capture_default_str();
  add_threads_option(c.translate, c.threads);

  attnlab::SampleOptions& s = c.sample_options;
  c.sample = app.add_subcommand("sample", "continue a prompt with a causal LM run's model");
  c.sample->add_option("run", c.sample_run, "the run folder")->required()->check(CLI::ExistingDirectory);
  c.sample->add_option("--prompt", s.prompt, "text (character-level runs) or the task's token names separated by spaces (e.g. \"sep 3 4\"); empty: the text's first "
                              "character or the task's token 1, shown first");
  cli::add_number(c.sample, "--tokens", s.tokens, "tokens to generate");
  cli::add_number(c.sample, "--temperature", s.temperature, "0 picks the most likely token", Range::at_least(0));
  cli::add_number(c.sample, "--top-k", s.top_k, "sample among the k most likely tokens; 0: all");
  cli::add_number(c.sample, "--seed", s.seed, "sampling seed");
  c.sample->add_option("--checkpoint", s.checkpoint, "best (last when the run has no best) or last")->capture_default_str();
  add_threads_option(c.sample, c.threads);

  c.export_ = app.add_subcommand("export", "a run's weights as .npy files named by parameter, with index.json");
  c.export_->add_option("run", c.export_run, "the run folder")->required()->check(CLI::ExistingDirectory);
  c.export_->add_option("dir", c.export_dir, "the folder to write")->required();
  c.export_->add_option("--checkpoint", c.export_checkpoint, "best (last when the run has no best) or last")->capture_default_str();

  add_analyze_command(app, c);
  c.compare = app.add_subcommand("compare", "train every variant x seed of a comparison file (CONFIG [key=value ...]); the same command resumes it");
  c.compare->add_option("args", c.compare_args, "the comparison's YAML file, then key=value overrides for every run")->required();
  cli::add_number(c.compare, "--jobs", c.compare_options.jobs, "runs at a time", Range::closed(1, 64));
  cli::add_number(c.compare, "--threads", c.compare_options.threads,
                  "threads per run; 0: the cores divided among the jobs (of every rank on this machine under mpirun)", Range::closed(0, attnlab::kMaxThreads));

  c.report = app.add_subcommand("report", "(re)write a run folder's report.html");
  c.report->add_option("run", c.report_dir, "the run folder")->required()->check(CLI::ExistingDirectory);
}

void add_generate_bench(CLI::App* bench, Commands& c) {
  attnlab::bench::GenerateBenchOptions& g = c.generate_options;
  c.generate = bench->add_subcommand("generate", "time per generated token against the context's length, with each kernel's decoding state "
                                                 "and recomputing; one JSON line per (kernel, mode, context)");
  c.generate->add_option("--kernels", g.kernels, "kernels; default: every registered one that supports causal attention")->delimiter(',');
  c.generate->add_option("--modes", g.modes, "cached (each kernel's decoding state), recomputed (a forward per token), or both")
      ->delimiter(',')
      ->capture_default_str();
  cli::add_number(c.generate, "--contexts", g.contexts, "context lengths (tokens before the generated ones)", Range::at_least(1));
  cli::add_number(c.generate, "--layers", g.layers, "transformer blocks", Range::at_least(1));
  cli::add_number(c.generate, "--heads", g.heads, "attention heads", Range::at_least(1));
  cli::add_number(c.generate, "--dim", g.dim, "model width", Range::at_least(1));
  cli::add_number(c.generate, "--vocab", g.vocab, "vocabulary size", Range::at_least(1));
  cli::add_number(c.generate, "--tokens", g.tokens, "tokens timed per cached case", Range::at_least(1));
  cli::add_number(c.generate, "--recomputed-tokens", g.recomputed_tokens, "tokens timed per recomputed case", Range::at_least(1));
  add_threads_option(c.generate, c.threads);
}

void add_tool_commands(CLI::App& app, Commands& c) {
  c.list = app.add_subcommand("list", "tasks, model kinds, and attention kernels with their capabilities and options");
  c.list->add_flag("--config-keys", c.config_keys, "instead: the tables of every config key, as docs/configs.md holds them");
  c.gradcheck = app.add_subcommand("gradcheck", "float64 gradient check of attention kernels in every mode they support (all: and the modules)");
  c.gradcheck->add_option("--kernel", c.check_kernel, "a kernel name, or all")->capture_default_str();
  add_threads_option(c.gradcheck, c.threads);

  CLI::App* bench = app.add_subcommand("bench", "benchmarks against the PyTorch references in scripts/bench");
  bench->require_subcommand(1);
  attnlab::bench::GptBenchOptions& g = c.gpt_options;
  c.gpt = bench->add_subcommand("gpt", "train the reference GPT on random tokens; prints one JSON line");
  cli::add_number(c.gpt, "--layers", g.layers, "transformer blocks", Range::at_least(1));
  cli::add_number(c.gpt, "--heads", g.heads, "attention heads", Range::at_least(1));
  cli::add_number(c.gpt, "--dim", g.dim, "model width", Range::at_least(1));
  cli::add_number(c.gpt, "--block", g.block, "sequence length", Range::at_least(1));
  cli::add_number(c.gpt, "--batch", g.batch, "sequences per step", Range::at_least(1));
  cli::add_number(c.gpt, "--vocab", g.vocab, "vocabulary size", Range::at_least(1));
  cli::add_number(c.gpt, "--steps", g.steps, "timed steps", Range::at_least(1));
  cli::add_number(c.gpt, "--warmup", g.warmup,
                  "untimed steps first (with more than one thread, also until the sharing tuner's first probe has chosen)");
  CLI::Option* forward = c.gpt->add_flag("--forward", g.forward,
                                         "time the eval forward alone (no graph), as Python's model(ids) runs it, instead of a training step");
  c.gpt->add_flag("--products", g.products, "also time each product form of the step: its library, calls, time and rate (products_by_shape)")
      ->excludes(forward);
  add_threads_option(c.gpt, c.threads);

  attnlab::bench::AttentionBenchOptions& a = c.attention_options;
  c.attention = bench->add_subcommand("attention", "forward + backward of attention kernels alone; one JSON line per (variant, length)");
  c.attention->add_option("--variants", a.variants, "kernels (and 'causal'); default: all registered")->delimiter(',');
  cli::add_number(c.attention, "--lengths", a.lengths, "sequence lengths", Range::at_least(1));
  cli::add_number(c.attention, "--batch", a.batch, "batch size", Range::at_least(1));
  cli::add_number(c.attention, "--heads", a.heads, "heads", Range::at_least(1));
  cli::add_number(c.attention, "--dhead", a.dhead, "head dimension", Range::at_least(1));
  c.attention->add_flag("--causal", a.causal, "every kernel with a causal mask (by default only 'causal' and the kernels that are causal only)");
  cli::add_number(c.attention, "--proj", a.proj, "projected length of kernels with a fixed maximum length (linformer's k)", Range::at_least(1));
  add_threads_option(c.attention, c.threads);
  cli::add_number(c.attention, "--min-seconds", a.min_seconds, "time each case at least this long", Range::at_least(0));
  add_generate_bench(bench, c);
}

int run_analyze(Commands& c) {
  attnlab::set_num_threads(resolve_threads(c.threads));
  const attnlab::AnalysisResult r = attnlab::analyze_run(c.analyze_run, c.analyze_options);
  std::printf("attnlab: wrote %s/analysis (%zu tables)%s\n", c.analyze_run.c_str(), r.tables.size(),
              r.report_written ? (" and " + c.analyze_run + "/report.html").c_str() : "");
  for (const std::string& note : r.notes) std::printf("  %s\n", note.c_str());
  return 0;
}

// `train CONFIG [overrides]` or `train --resume RUN [overrides]`.
int run_train(const Commands& c) {
  if (!c.resume_dir.empty()) return attnlab::resume_experiment(c.resume_dir, c.train_args, resolve_threads(c.threads)).exit_status();
  if (c.train_args.empty() || c.train_args[0].find('=') != std::string::npos) {
    std::fprintf(stderr, "attnlab train: give a config file (attnlab train CONFIG [key=value ...]) or --resume RUN\n");
    return 2;
  }
  const std::vector<std::string> overrides(c.train_args.begin() + 1, c.train_args.end());
  attnlab::ExperimentConfig config;
  attnlab::dist::Communicator::world().agree([&] { config = attnlab::load_config(c.train_args[0], overrides); });  // printed once
  return attnlab::train_experiment(config, resolve_threads(c.threads)).exit_status();
}

int run_compare(Commands& c) {
  if (c.compare_args[0].find('=') != std::string::npos) {
    std::fprintf(stderr, "attnlab compare: give a comparison file first (attnlab compare CONFIG [key=value ...])\n");
    return 2;
  }
  c.compare_options.overrides.assign(c.compare_args.begin() + 1, c.compare_args.end());
  return attnlab::run_comparison(c.compare_args[0], c.compare_options);
}

int dispatch(Commands& c) {
  if (*c.train) return run_train(c);
  if (*c.compare) return run_compare(c);
  if (*c.report) {
    attnlab::write_run_report(c.report_dir);
    std::printf("attnlab: wrote %s/report.html\n", c.report_dir.c_str());
    return 0;
  }
  if (*c.analyze) return run_analyze(c);
  if (*c.export_) return attnlab::export_run(c.export_run, c.export_checkpoint, c.export_dir);
  if (*c.eval) {
    check_decode_options(c.eval, c.eval_decoding);
    // Any decoding option asks for decoding, as --decode does (one left unread would be ignored).
    const bool decode = c.eval_decode || c.eval_show > 0 || c.eval->count("--beam") || c.eval->count("--max-length") ||
                        c.eval->count("--length-penalty");
    return attnlab::evaluate_run(c.eval_run, c.eval_checkpoint, resolve_threads(c.threads), decode ? &c.eval_decoding : nullptr, c.eval_show);
  }
  if (*c.translate) check_decode_options(c.translate, c.translate_options.decode);
  if (*c.translate) return attnlab::translate_run(c.translate_run, c.translate_options, resolve_threads(c.threads));
  if (*c.sample) return attnlab::sample_run(c.sample_run, c.sample_options, resolve_threads(c.threads));
  if (*c.list) return c.config_keys ? attnlab::list_config_keys() : attnlab::list_registered();
  if (*c.gradcheck) {
    attnlab::set_num_threads(resolve_threads(c.threads));
    return attnlab::gradcheck_kernels(c.check_kernel);
  }
  if (*c.gpt) {
    c.gpt_options.threads = resolve_threads(c.threads);
    return attnlab::bench::run_gpt_bench(c.gpt_options);
  }
  if (*c.attention) {
    c.attention_options.threads = resolve_threads(c.threads);
    return attnlab::bench::run_attention_bench(c.attention_options);
  }
  if (*c.generate) {
    c.generate_options.threads = resolve_threads(c.threads);
    return attnlab::bench::run_generate_bench(c.generate_options);
  }
  return 0;
}

// Under an MPI launcher (framework/distributed/communicator.hpp): train, compare and bench gpt run on
// every rank and initialise MPI; any other command is refused with more than one process, rather than
// run N times into the same files. Without a launcher nothing here touches MPI.
void start_mpi(const Commands& c, int* argc, char*** argv) {
  namespace dist = attnlab::dist;
  if (*c.train || *c.compare || *c.gpt) return dist::Communicator::init(argc, argv);
  if (dist::launched_world_size() > 1) {
    throw std::invalid_argument("this command runs on one process, but mpirun started " + std::to_string(dist::launched_world_size()) +
                                "; run it without mpirun (under mpirun: train, compare and bench gpt)");
  }
}

// An error as printed: a config error says so.
std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const attnlab::ConfigError& e) {
    return std::string("config error: ") + e.what();
  } catch (const std::bad_alloc&) {  // a size no estimate caught before it was allocated
    return "out of memory: a size in the config or on the command line asks for more memory than this machine has; lower it";
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown error";
  }
}

// `--exclude-bos true`: CLI11 says only that "true" was not expected. When the word before it is a switch
// of the command (an option that takes no value), says how a switch is set; else "".
std::string switch_given_a_value(const CLI::App& app, int argc, char** argv) {
  const CLI::App* command = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    for (const CLI::App* sub : command->get_subcommands([](const CLI::App*) { return true; }))
      if (sub->check_name(word)) command = sub;
    static const std::vector<std::string> values = {"true", "false", "yes", "no", "on", "off", "1", "0"};
    if (i < 2 || std::find(values.begin(), values.end(), word) == values.end()) continue;
    const std::string previous = argv[i - 1];
    if (previous.rfind("--", 0) != 0 || previous.find('=') != std::string::npos) continue;
    const CLI::Option* option = command->get_option_no_throw(previous);
    if (option && option->get_expected_max() == 0) {
      return "`" + previous + " " + word + "`: " + previous + " is a switch, which takes no separate value; give it alone to turn it on, or write " +
             previous + "=" + word;
    }
  }
  return "";
}

// Says what is wrong with the command line (or prints --help) and returns `status`. Every rank of an
// mpirun meets the same command line, so rank 0 alone prints while the others wait for it at a barrier
// (mpirun ends the job when a rank exits non-zero, and could kill rank 0 before it has printed).
template <class Print>
int said_once(int* argc, char*** argv, int status, Print print) {
  namespace dist = attnlab::dist;
  if (dist::launched_world_size() < 2) {
    print();
    return status;
  }
  dist::Communicator::init(argc, argv);
  if (dist::Communicator::world().rank() == 0) print();
  std::fflush(stderr);
  std::fflush(stdout);
  dist::Communicator::world().barrier();
  dist::Communicator::finalize();
  return status;
}

// An error's message; under mpirun it names the rank and ends every rank of the job (MPI_Abort), which
// would otherwise wait for this one forever.
int fail(const std::string& message) {
  const attnlab::dist::Communicator& world = attnlab::dist::Communicator::world();
  if (world.distributed()) attnlab::dist::Communicator::abort("attnlab (" + world.who() + "): " + message, 2);
  std::fprintf(stderr, "attnlab: %s\n", message.c_str());
  attnlab::dist::Communicator::finalize();  // mpirun -np 1: a world of one ends as a plain process does
  return 2;
}

// An error the ranks agreed on (Communicator::agree), every rank at the same point: rank 0 prints its
// message and any other rank one that differs, and every rank ends normally (no MPI_Abort, whose kills
// of ranks still printing cut their words short and add OpenMPI's ORTE_ERROR_LOG lines).
int fail_together(const attnlab::dist::JobFailed& failure) {
  const attnlab::dist::Communicator& world = attnlab::dist::Communicator::world();
  if (failure.own()) {
    const std::string who = world.rank() == 0 ? "" : " (" + world.who() + ")";
    std::fprintf(stderr, "attnlab%s: %s\n", who.c_str(), message_of(failure.own()).c_str());
  }
  attnlab::dist::Communicator::finalize();
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  attnlab::reexec_with_blas_core(argv);
  attnlab::stop_with_parent();  // a run started by `attnlab compare` ends with it
  CLI::App app{"attnlab: train mini transformers and compare attention mechanisms"};
  app.require_subcommand(1);
  Commands commands;
  add_run_commands(app, commands);
  add_tool_commands(app, commands);
  // CLI11 says only "A subcommand is required" when the first word is no command: name it, and the commands.
  if (argc > 1 && std::string(argv[1]) != "-h" && std::string(argv[1]) != "--help") {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->check_name(argv[1]);
    }
    if (!known) {
      const std::string word = argv[1];
      return said_once(&argc, &argv, 2, [&] {
        std::fprintf(stderr, "attnlab: '%s' is not a command; give one of %s first (attnlab --help says what each does)\n", word.c_str(), names.c_str());
      });
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const std::string hint = e.get_exit_code() != 0 ? switch_given_a_value(app, argc, argv) : "";  // a word after a switch: its cause
    // --help is not an error; every bad argument exits 2, as bad input does.
    return said_once(&argc, &argv, e.get_exit_code() == 0 ? 0 : 2, [&] {
      if (hint.empty()) app.exit(e);
      else std::fprintf(stderr, "attnlab: %s\n", hint.c_str());
    });
  }
  // train unblocks the stop signals once its handler is in place (stop_signals.hpp); any other command
  // started by `attnlab compare` (a run's analysis) stops at once, as a signal's default.
  if (!*commands.train) attnlab::unblock_stop_signals();
  // A reader that went away (a closed pipe) makes a write fail instead of killing the process: a run
  // whose output is gone still stops with its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    start_mpi(commands, &argc, &argv);
    const int status = dispatch(commands);
    attnlab::dist::Communicator::finalize();
    return status;
  } catch (const attnlab::StoppedBySignal& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 128 + e.signal;
  } catch (const attnlab::dist::JobFailed& failure) {
    return fail_together(failure);
  } catch (...) {
    return fail(message_of(std::current_exception()));
  }
}
