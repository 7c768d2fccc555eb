#include "experiments/runner/config.hpp"

#include <algorithm>
#include <sstream>

#include "experiments/runner/memory_estimate.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/attention/kernel.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/optim/optimizer.hpp"

namespace attnlab {
namespace {

// ---- the sections, each key described once ----

Schema<TaskChoice> task_schema() {
  Schema<TaskChoice> s;
  add_component<TaskChoice, data::TaskInfo>(
      s, "name", [](TaskChoice& t) -> ComponentChoice& { return t; }, []() -> const data::TaskRegistry& { return data::TaskRegistry::instance(); },
      "the task (`attnlab list` describes each): toy tasks generated from the seed, char_text, scan, or an image task; its own "
      "keys sit beside the name");
  return s;
}

template <class T>
std::function<T&(ModelConfig&)> stack(T EncoderConfig::*member) {
  return [member](ModelConfig& m) -> T& { return m.encoder.*member; };
}

Schema<EncoderConfig> attention_schema() {
  Schema<EncoderConfig> s;
  s.name("name", &EncoderConfig::attention, [] { return KernelRegistry::instance().names(); },
         "the attention kernel (`attnlab list`); its capabilities must fit the model (linformer cannot be causal)");
  s.yaml("options", &EncoderConfig::attention_options, "the kernel's own options, checked by the kernel (docs/attention.md)");
  s.field("short_conv", &EncoderConfig::short_conv,
          "kernel size of a causal depthwise convolution on q, k and v before any kernel (self-attention; Zoology's Based recipe, "
          "flash-linear-attention's ShortConvolution; 4 is their usual size); 0: none");
  return s;
}

Schema<ModelConfig> model_schema() {
  Schema<ModelConfig> s;
  add_component<ModelConfig, ModelKindInfo>(
      s, "kind", [](ModelConfig& m) -> ComponentChoice& { return m.kind; }, []() -> const ModelRegistry& { return ModelRegistry::instance(); },
      "`causal_lm` (decoder), `token_tagger` (bidirectional encoder, a label per token), `sequence_classifier`, `vit` (images), "
      "`seq2seq` (encoder-decoder); its own keys (positional, pooling, ...) sit beside the stack's");
  s.field<std::size_t>("d_model", stack(&EncoderConfig::d_model), "width", Range::at_least(1));
  s.field<std::size_t>("n_heads", stack(&EncoderConfig::n_heads), "attention heads; must divide d_model", Range::at_least(1));
  s.field<std::size_t>("n_layers", stack(&EncoderConfig::n_layers), "transformer blocks", Range::at_least(1));
  s.field<std::size_t>("ff_hidden", stack(&EncoderConfig::ff_hidden), "feed-forward width; 0 means 4 d_model");
  s.field<bool>("feed_forward", stack(&EncoderConfig::feed_forward),
                "`false`: blocks of attention alone, no feed-forward (Zoology's MQAR models, whose state mixer is the identity; "
                "TransformerLens's attn_only)");
  s.choice<NormPlacement>("norm", stack(&EncoderConfig::norm), norm_placement_names(), "`pre` (GPT-2), `post` (original Transformer) or `none` (no LayerNorm at all: Nanda et al.'s grokking model)");
  s.choice<Activation>("activation", stack(&EncoderConfig::activation), activation_names(), "the feed-forward activation");
  s.choice<InitScheme>("init", stack(&EncoderConfig::init), init_scheme_names(),
                       "how weights start: `gpt2`, N(0, 0.02) with the residual projections scaled down (GPT-2, nanoGPT; a ViT keeps its "
                       "modules' own); `fan_in`, "
                       "N(0, 1/sqrt(fan-in)) and embeddings N(0, 1/sqrt(width)) (Nanda et al.'s grokking model)");
  s.field<double>("dropout", stack(&EncoderConfig::dropout), "dropout on residual branches", Range::closed_open(0.0, 1.0));
  s.field<bool>("bias", stack(&EncoderConfig::bias),
                "biases in the blocks' Linear layers (attention projections, feed-forward) and LayerNorm shifts; `false` is "
                "nanoGPT's `bias=False` (gains stay)");
  s.field("init_from", &ModelConfig::init_from,
          "a weights folder written by `attnlab export` (or by numpy: one .npy per tensor and index.json) to start from")
      .resumable();
  s.section<EncoderConfig>("attention", [](ModelConfig& m) -> EncoderConfig& { return m.encoder; }, attention_schema());
  return s;
}

Schema<OptimizerChoice> optimizer_schema() {
  Schema<OptimizerChoice> s;
  add_component<OptimizerChoice, OptimizerInfo>(
      s, "name", [](OptimizerChoice& o) -> ComponentChoice& { return o; }, []() -> const OptimizerRegistry& { return OptimizerRegistry::instance(); },
      "the optimizer (`attnlab list` describes each); its own keys (lr, ...) sit beside the name");
  return s;
}

Schema<ScheduleOptions> schedule_schema() {
  Schema<ScheduleOptions> s;
  s.choice("kind", &ScheduleOptions::kind, schedule_kind_names(), "the learning-rate schedule (its peak is train.optimizer.lr)");
  s.field("warmup_steps", &ScheduleOptions::warmup_steps, "steps of linear warmup");
  s.field("decay_steps", &ScheduleOptions::decay_steps, "where the decay reaches min_lr (decaying kinds); 0 for constant")
      .default_shown_as("train.steps (0 for constant)");
  s.field("min_lr", &ScheduleOptions::min_lr, "the floor of the decay", Range::at_least(0.0));
  return s;
}

// The schedule's checks at the key each is about (lr lives in the optimizer section).
void check_schedule_keys(const ConfigNode& train, TrainConfig& t) {
  const YAML::Node schedule = train.node()["schedule"];
  if (!schedule.IsDefined() || !schedule.IsMap() || !schedule["decay_steps"].IsDefined()) {
    t.schedule.decay_steps = t.schedule.kind == ScheduleKind::constant ? 0 : t.steps;
  }
  t.schedule.lr = t.optimizer.lr();
  try {
    check_schedule(t.schedule);
  } catch (const OptionError& e) {
    const bool lr = e.key() == "lr";
    ConfigNode section(train.node()[lr ? "optimizer" : "schedule"], train.dotted(lr ? "optimizer" : "schedule"), train.source_ptr());
    section.fail(e.key(), "train.schedule: " + std::string(e.what()));
  }
}

Schema<TrainConfig> train_schema() {
  Schema<TrainConfig> s;
  s.field("steps", &TrainConfig::steps, "optimizer steps", Range::at_least(1)).resumable();
  s.field("batch_size", &TrainConfig::batch_size, "sequences per step; under mpirun the global batch, split evenly over the processes",
          Range::at_least(1));
  s.field("grad_clip", &TrainConfig::grad_clip, "clip the global gradient norm to this; 0 turns clipping off", Range::at_least(0.0));
  s.field("label_smoothing", &TrainConfig::label_smoothing,
          "the training loss spreads this share of each target's probability evenly over the classes (PyTorch's "
          "`label_smoothing`; the original Transformer's 0.1); held-out losses are plain cross-entropy",
          Range::closed_open(0.0, 1.0));
  s.field("eval_interval", &TrainConfig::eval_interval, "evaluate on the held-out split every this many steps (and at the end)",
          Range::at_least(1))
      .resumable();
  s.field("eval_batches", &TrainConfig::eval_batches,
          "held-out batches of `batch_size` per evaluation (the same ones every time); 0 means the whole held-out split in "
          "order (char_text: consecutive block_size windows, so every validation character after the first is predicted "
          "once; fashion_mnist: all 10,000 test images); generated tasks have no whole split")
      .resumable();
  s.field("eval_train", &TrainConfig::eval_train,
          "each evaluation also scores max(1, eval_batches) training batches of `batch_size`, the same ones every time (a task whose "
          "training split fits in one batch, as modular's under full-batch training, gives all of it), logged as split `eval_train`: "
          "memorising shows there before it shows on the held-out split")
      .resumable();
  s.field("final_eval_batches", &TrainConfig::final_eval_batches,
          "the same for the evaluation after the last step, the figure to report (split `final` in the metrics); e.g. 20 "
          "sampled batches during training and 0 (the whole split) at the end")
      .derived_default("train.eval_batches", [](TrainConfig& t) { t.final_eval_batches = t.eval_batches; })
      .resumable();
  s.field("checkpoint_interval", &TrainConfig::checkpoint_interval,
          "also write `last.ckpt` every this many steps (it is always written at the end, on Ctrl-C and on SIGTERM)")
      .resumable();
  s.field("keep_checkpoints", &TrainConfig::keep_checkpoints,
          "keep every `checkpoint_interval` checkpoint as `checkpoints/step_N.ckpt` beside `last.ckpt` (the analysis's progress measures "
          "read them: the fourier part of a modular run)")
      .resumable();
  s.section("optimizer", &TrainConfig::optimizer, optimizer_schema());
  s.section("schedule", &TrainConfig::schedule, schedule_schema());
  s.rule(check_schedule_keys);
  return s;
}

Schema<LogConfig> log_schema() {
  Schema<LogConfig> s;
  s.field("dir", &LogConfig::dir, "where run folders go").resumable();
  s.field("interval", &LogConfig::interval, "a progress line and a metrics row every this many steps", Range::at_least(1)).resumable();
  s.field("patterns", &LogConfig::patterns, "capture every layer's and head's attention pattern on fixed held-out probes").resumable();
  s.field("pattern_interval", &LogConfig::pattern_interval,
          "capture every this many steps; 0 means at every evaluation (and always at the end)")
      .resumable();
  s.field("probes", &LogConfig::probes, "probe examples per capture", Range::at_least(1)).resumable();
  s.rule([](const ConfigNode& node, LogConfig& l) {
    if (l.dir.empty()) node.fail("dir", "'log.dir' is empty; give the folder runs go to (runs, by default)");
    for (char ch : l.dir)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
        node.fail("dir", "'log.dir' holds a control character (a newline or tab?); give a plain path");
      }
  });
  return s;
}

// ---- checks across sections ----

// A ConfigNode over the section at dotted `path` of the root ("model.attention"), for positioned errors.
ConfigNode section_of(const ConfigNode& root, const std::string& path) {
  YAML::Node node = root.node();
  std::stringstream parts(path);
  // reset, not =: assigning one YAML::Node to another rewrites the node it refers to.
  for (std::string part; std::getline(parts, part, '.');) node.reset(node.IsMap() ? node[part] : YAML::Node());
  return ConfigNode(node, path, root.source_ptr());
}

// The kinds that read one of `formats`, for "use model.kind a or b".
std::string kinds_reading(const std::vector<TaskFormat>& formats) {
  std::string list;
  for (const std::string& name : ModelRegistry::instance().names()) {
    const TaskFormat f = ModelRegistry::instance().find(name).format;
    if (std::find(formats.begin(), formats.end(), f) != formats.end()) list += (list.empty() ? "" : " or ") + name;
  }
  return list;
}

void check_model(const ConfigNode& root, const ExperimentConfig& c) {
  const ModelKindInfo& kind = ModelRegistry::instance().find(c.model.kind.name);
  const ConfigNode model = section_of(root, "model");
  const auto formats = data::TaskRegistry::instance().find(c.task.name).formats(c.task.options);
  if (std::find(formats.begin(), formats.end(), kind.format) == formats.end()) {
    model.fail("kind", "task '" + c.task.name + "' cannot train a " + kind.name + "; use model.kind " + kinds_reading(formats));
  }
  const EncoderConfig& e = c.model.encoder;
  if (e.d_model % e.n_heads != 0) {
    model.fail("n_heads", "model.n_heads (" + std::to_string(e.n_heads) + ") must divide model.d_model (" + std::to_string(e.d_model) + ")");
  }
  try {
    kind.stack(c.model, data_shape(c));  // the kind's own options against the data
  } catch (const OptionError& e) {
    model.fail(e.key(), e.what());
  }
}

// How the model calls a kernel, for messages.
std::string kernel_role(const KernelSpec& spec) {
  return spec.cross ? "cross-attention" : spec.causal ? "causal attention" : "bidirectional attention";
}

void check_attention(const ConfigNode& root, const ExperimentConfig& c) {
  for (const KernelUse& use : kernel_uses(c.model, data_shape(c))) {
    const ConfigNode attention = section_of(root, use.key);
    const std::size_t conv = c.model.encoder.short_conv;
    if (!use.spec.cross && conv > use.spec.max_len) {  // checked before its weights [3C, K] are sized by it
      section_of(root, "model.attention")
          .fail("short_conv", "model.attention.short_conv (" + std::to_string(conv) + ") must be at most the " + std::to_string(use.spec.max_len) +
                                  " tokens " + use.key + " sees: a wider convolution adds weights that never meet a token");
    }
    try {
      check_kernel_capabilities(use.name, use.spec);
    } catch (const std::invalid_argument& error) {
      attention.fail("name", std::string(error.what()) + " (model.kind " + c.model.kind.name + " uses " + use.key + " for " +
                                 kernel_role(use.spec) + ")");
    }
    // The kernel reads its own options (positioned errors), without building anything yet. A check about
    // the model rather than an option, with no options mapping to point at, points at the kernel's name.
    try {
      check_kernel(use.name, use.spec, ComponentOptions(use.options.node(), use.key + ".options", root.source_ptr()), c.train.batch_size);
    } catch (const ConfigError& error) {
      if (error.line() == 0 && error.origin().empty()) attention.fail("name", error.message());
      throw;
    }
  }
}

void check_evaluation(const ConfigNode& root, const ExperimentConfig& c) {
  const bool walkable = data::TaskRegistry::instance().find(c.task.name).held_out_split;
  for (const auto& [key, batches] : {std::pair<std::string, std::size_t>{"eval_batches", c.train.eval_batches},
                                     {"final_eval_batches", c.train.final_eval_batches}}) {
    if (batches == 0 && !walkable) {
      section_of(root, "train").fail(key, "train." + key + " 0 means the whole held-out split, which task '" + c.task.name +
                                              "' does not have (it generates held-out examples afresh); give a number of batches");
    }
  }
}

thread_local bool g_unsized = false;  // parse_config_unsized is reading

// An estimate of the memory the experiment needs, before anything is allocated.
void check_memory(const ConfigNode& root, const ExperimentConfig& c) {
  if (g_unsized) return;
  const auto [key, message] = memory_problem(c, physical_memory_bytes());
  if (key.empty()) return;
  const std::size_t dot = key.rfind('.');
  section_of(root, key.substr(0, dot)).fail(key.substr(dot + 1), message);
}

void check_experiment(const ConfigNode& root, ExperimentConfig& c) {
  const std::string problem = folder_name_problem(c.name);
  if (!problem.empty()) root.fail("name", "'name' names the run's folder: " + problem);
  check_model(root, c);  // the task checked its own keys as they were read (add_component)
  check_attention(root, c);
  check_evaluation(root, c);
  check_memory(root, c);  // last: it sizes everything the checks above accepted
}

Schema<ExperimentConfig> make_schema() {
  Schema<ExperimentConfig> s;
  s.field("name", &ExperimentConfig::name, "names the run folder (`log.dir/name`, then `name-2`, ... when taken): letters, "
                                           "digits, `_`, `-`, `.`")
      .resumable();
  s.field("seed", &ExperimentConfig::seed, "seeds initialisation, data and dropout: same seed, same thread count, same run");
  s.section("task", &ExperimentConfig::task, task_schema());
  s.section("model", &ExperimentConfig::model, model_schema());
  s.section("train", &ExperimentConfig::train, train_schema());
  s.section("log", &ExperimentConfig::log, log_schema());
  s.rule(check_experiment);
  return s;
}

ExperimentConfig read(YAML::Node root, ConfigSourcePtr source) {
  ExperimentConfig c;
  ConfigNode node(root, "", std::move(source));
  config_schema().read(node, c);
  return c;
}

}  // namespace

const Schema<ExperimentConfig>& config_schema() {
  static const Schema<ExperimentConfig> schema = make_schema();
  return schema;
}

TaskFormat task_format(const ExperimentConfig& c) { return ModelRegistry::instance().find(c.model.kind.name).format; }

DataShape data_shape(const ExperimentConfig& c) { return data::TaskRegistry::instance().find(c.task.name).shape(c.task.options, task_format(c)); }

std::size_t attention_length(const ExperimentConfig& c) {
  return ModelRegistry::instance().find(c.model.kind.name).stack(c.model, data_shape(c)).max_len;
}

std::string kernel_names(const ExperimentConfig& c) {
  const std::vector<KernelUse> uses = kernel_uses(c.model, data_shape(c));
  bool one = true;
  for (const KernelUse& use : uses) one = one && use.name == uses.front().name;
  if (one) return uses.empty() ? "" : uses.front().name;
  std::string names;
  for (const KernelUse& use : uses) names += (names.empty() ? "" : ", ") + use.part + " " + use.name;
  return names;
}

bool captures_patterns(const ExperimentConfig& c) {
  if (!c.log.patterns) return false;
  for (const KernelUse& use : kernel_uses(c.model, data_shape(c)))
    if (KernelRegistry::instance().find(use.name).capabilities.pattern) return true;
  return false;
}

std::string why_no_patterns(const ExperimentConfig& c) {
  if (!c.log.patterns) return "log.patterns is false";
  if (!captures_patterns(c)) {
    const std::string names = kernel_names(c);
    return names.find(',') == std::string::npos ? "its kernel, " + names + ", forms no attention matrix to draw"
                                                : "its kernels (" + names + ") form no attention matrix to draw";
  }
  const std::size_t every = c.log.pattern_interval ? c.log.pattern_interval : c.train.eval_interval;
  const std::size_t first = every ? std::min(every, c.train.steps) : c.train.steps;
  return "the run ended before its first capture, at step " + std::to_string(first) + " (every " +
         (c.log.pattern_interval ? "log.pattern_interval" : "train.eval_interval") + ")";
}

std::pair<std::string, std::string> kernels_and_why_no_patterns(const std::string& config_text, const std::string& file) {
  try {
    const ExperimentConfig config = parse_config(config_text, file);
    return {kernel_names(config), why_no_patterns(config)};
  } catch (const std::exception&) {
    const YAML::Node model = read_config_document(config_text, file)["model"];
    const YAML::Node attention = model && model.IsMap() ? model["attention"] : YAML::Node();
    return {(attention && attention.IsMap() ? attention["name"].as<std::string>("?") : "?") + " (model.attention)",
            "log.patterns is off, the kernels form no attention matrix, or the run ended before its first capture"};
  }
}

std::string why_run_has_no_patterns(const std::string& run_dir) {
  try {
    const std::string file = run_dir + "/config.yaml";
    return kernels_and_why_no_patterns(read_file(file, "the run's config"), file).second;
  } catch (const std::exception& e) {
    return e.what();
  }
}

ExperimentConfig parse_config(const std::string& text, const std::string& file,
                              const std::vector<std::pair<std::string, std::string>>& overrides) {
  auto source = std::make_shared<ConfigSource>(file, text);
  YAML::Node root = read_config_document(text, file);
  for (const auto& [assignment, origin] : overrides) apply_override(root, assignment, *source, origin);
  return read(root, source);
}

ExperimentConfig parse_config(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  check_distinct_overrides(overrides);
  std::vector<std::pair<std::string, std::string>> described;
  for (const std::string& o : overrides) described.emplace_back(o, "");
  return parse_config(text, file, described);
}

ExperimentConfig parse_config_unsized(const std::string& text, const std::string& file) {
  struct Unsized {
    Unsized() { g_unsized = true; }
    ~Unsized() { g_unsized = false; }
  } unsized;
  return parse_config(text, file);
}

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_config_text(path), path, overrides);
}

std::string config_to_yaml(const ExperimentConfig& c) { return to_yaml(config_schema(), c); }

namespace {

std::string markdown_table(const std::vector<KeyDoc>& rows) {
  std::ostringstream out;
  out << "| key | default | values | meaning |\n|---|---|---|---|\n";
  for (const KeyDoc& d : rows) out << "| `" << d.key << "` | " << d.default_text << " | " << d.values << " | " << d.doc << " |\n";
  return out.str();
}

// Each extension point's components, their keys dotted under the section they sit in.
std::vector<std::pair<std::string, std::vector<KeyDoc>>> component_doc_rows() {
  std::vector<std::pair<std::string, std::vector<KeyDoc>>> out;
  for (auto [name, rows] : component_docs(data::TaskRegistry::instance(), "task.")) out.emplace_back("task." + name, rows);
  for (auto [name, rows] : component_docs(ModelRegistry::instance(), "model.")) out.emplace_back("model." + name, rows);
  for (auto [name, rows] : component_docs(OptimizerRegistry::instance(), "train.optimizer.")) out.emplace_back("train.optimizer." + name, rows);
  return out;
}

}  // namespace

std::vector<std::string> config_keys() {
  std::vector<std::string> keys = config_schema().keys();
  for (const auto& [marker, rows] : component_doc_rows())
    for (const KeyDoc& d : rows)
      if (std::find(keys.begin(), keys.end(), d.key) == keys.end()) keys.push_back(d.key);
  return keys;
}

std::vector<std::pair<std::string, std::string>> config_doc_tables() {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<KeyDoc> all = config_schema().docs();
  for (const char* section : {"", "task", "model", "train", "log"}) {
    std::vector<KeyDoc> rows;
    for (const KeyDoc& d : all) {
      const std::size_t dot = d.key.find('.');
      if ((dot == std::string::npos ? "" : d.key.substr(0, dot)) == section) rows.push_back(d);
    }
    out.emplace_back(*section ? section : "top", markdown_table(rows));
  }
  for (const auto& [marker, rows] : component_doc_rows()) out.emplace_back(marker, markdown_table(rows));
  return out;
}

double OptimizerChoice::lr() const { return OptimizerRegistry::instance().find(name).lr(options); }

std::vector<KeyDifference> config_differences(const ExperimentConfig& a, const ExperimentConfig& b, bool include_resumable) {
  return config_schema().differences(a, b, "", include_resumable);
}

}  // namespace attnlab
