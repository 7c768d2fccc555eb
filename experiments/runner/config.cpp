#include "experiments/runner/config.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "framework/attention/kernel.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

// A ConfigNode that also records the dotted name of every key it reads (for config_keys()).
class Section {
 public:
  Section(const YAML::Node& node, const std::string& path, const std::string& file, std::vector<std::string>* keys)
      : node_(node, path, file), path_(path), keys_(keys) {}
  template <class T>
  T get(const std::string& key, const T& fallback, const Range& range = Range::any()) {
    note(key);
    return node_.get(key, fallback, range);
  }
  std::string choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& choices) {
    note(key);
    return node_.get_choice(key, fallback, choices);
  }
  std::vector<std::string> choices(const std::string& key, const std::vector<std::string>& fallback,
                                   const std::vector<std::string>& valid) {
    note(key);
    return node_.get_choices(key, fallback, valid);
  }
  YAML::Node child(const std::string& key) { return node_.child(key); }  // a nested section records its own keys
  void finish() { node_.finish(); }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const { node_.fail(key, message); }
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  void note(const std::string& key) {
    if (keys_) keys_->push_back(sub(key));
  }
  ConfigNode node_;
  std::string path_;
  std::vector<std::string>* keys_;
};

// Sets `path` (dotted) in `root` to the YAML value `text`, creating maps on the way.
void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("", 0, 0, "override '" + assignment + "' must look like key=value, e.g. train.steps=500");
  }
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("", 0, 0, "override '" + assignment + "': the value is not valid YAML (" + e.msg + ")");
  }
  std::vector<YAML::Node> chain{root};
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      throw ConfigError("", 0, 0, "override '" + assignment + "': '" + parts[i] + "' is a value, not a section");
    }
    if (!next.IsDefined() || next.IsNull()) chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
    chain.push_back(chain.back()[parts[i]]);
  }
  chain.back()[parts.back()] = value;
}

ExperimentConfig read(const YAML::Node& root, const std::string& file, std::vector<std::string>* keys) {
  ExperimentConfig c;
  c.file = file;
  Section top(root, "", file, keys);
  c.name = top.get<std::string>("name", c.name);
  c.seed = static_cast<std::uint64_t>(top.get<std::int64_t>("seed", 0, Range::at_least(0)));

  std::vector<std::string> task_names = data::toy_task_names();
  task_names.push_back("char_text");
  task_names.push_back("quadrants");
  task_names.push_back("fashion_mnist");
  Section task(top.child("task"), "task", file, keys);
  c.task.name = task.choice("name", c.task.name, task_names);
  c.task.toy.name = c.task.name;
  c.task.toy.length = task.get<std::size_t>("length", c.task.toy.length, Range::at_least(1));
  c.task.toy.symbols = task.get<std::size_t>("symbols", c.task.toy.symbols, Range::at_least(2));
  c.task.toy.pairs = task.get<std::size_t>("pairs", c.task.toy.pairs, Range::at_least(1));
  c.task.toy.queries = task.get<std::size_t>("queries", c.task.toy.queries);
  c.task.toy.gap = task.get<std::size_t>("gap", c.task.toy.gap);
  c.task.toy.sequence_length = task.get<std::size_t>("sequence_length", c.task.toy.sequence_length);
  c.task.toy.random_filler = task.get("random_filler", c.task.toy.random_filler);
  c.task.toy.held_out_fraction = task.get("held_out_fraction", c.task.toy.held_out_fraction, Range::open(0.0, 1.0));
  c.task.path = task.get<std::string>("path", c.task.path);
  c.task.block_size = task.get<std::size_t>("block_size", c.task.block_size, Range::at_least(1));
  c.task.train_fraction = task.get("train_fraction", c.task.train_fraction, Range::open(0.0, 1.0));
  c.task.image_size = task.get<std::size_t>("image_size", c.task.image_size, Range::at_least(4));
  c.task.augment.flip = task.get("flip", c.task.augment.flip);
  c.task.augment.shift = task.get<std::size_t>("shift", c.task.augment.shift, Range::closed(0, 13));
  auto only_fashion_mnist = [&](const std::string& key, bool used) {
    if (used && c.task.name != "fashion_mnist") {
      task.fail(key, "task." + key + " augments fashion_mnist's training images only; remove it for task '" + c.task.name +
                         "'" + (c.task.name == "quadrants" ? " (a mirrored or shifted quadrants image can change its label)" : ""));
    }
  };
  only_fashion_mnist("flip", c.task.augment.flip);
  only_fashion_mnist("shift", c.task.augment.shift > 0);
  if (c.task.name == "quadrants" && c.task.image_size % 2 != 0) task.fail("image_size", "task.image_size must be even for quadrants");
  if (c.task.name == "fashion_mnist" && c.task.path.empty()) c.task.path = "/usr/share/datasets/fashion-mnist";
  if (c.task.name == "char_text" && c.task.path.empty()) task.fail("path", "task.path is required for char_text: the text file to train on");
  if (c.task.name == "mqar" && c.task.toy.pairs > c.task.toy.symbols) {
    task.fail("pairs", "task.pairs (" + std::to_string(c.task.toy.pairs) + ") must not exceed task.symbols (" +
                           std::to_string(c.task.toy.symbols) + "): keys are distinct symbols");
  }
  if (c.task.name == "mqar" && c.task.toy.sequence_length != 0) {
    const std::size_t pairs = c.task.toy.pairs, queries = c.task.toy.queries == 0 ? pairs : c.task.toy.queries;
    if (queries > pairs) {
      task.fail("queries", "task.queries (" + std::to_string(queries) + ") must not exceed task.pairs (" + std::to_string(pairs) +
                               ") when task.sequence_length is set: each key is queried once");
    }
    if (c.task.toy.sequence_length < 2 * pairs + 2 * queries) {
      task.fail("sequence_length", "task.sequence_length (" + std::to_string(c.task.toy.sequence_length) + ") is too short for " +
                                       std::to_string(pairs) + " pairs and " + std::to_string(queries) +
                                       " queries: it needs at least 2 * pairs + 2 * queries = " +
                                       std::to_string(2 * pairs + 2 * queries) + "; raise it or lower task.pairs");
    }
  }
  task.finish();

  Section model(top.child("model"), "model", file, keys);
  c.model.kind = model.choice("kind", c.model.kind, {"causal_lm", "token_tagger", "sequence_classifier", "vit"});
  c.model.patch_size = model.get<std::size_t>("patch_size", c.model.patch_size, Range::at_least(1));
  EncoderConfig& e = c.model.encoder;
  e.d_model = model.get<std::size_t>("d_model", 64, Range::at_least(1));
  e.n_heads = model.get<std::size_t>("n_heads", 4, Range::at_least(1));
  e.n_layers = model.get<std::size_t>("n_layers", 2, Range::at_least(1));
  e.ff_hidden = model.get<std::size_t>("ff_hidden", 0);
  e.norm = parse_norm_placement(model.choice("norm", "pre", {"pre", "post"}));
  e.activation = parse_activation(model.choice("activation", "gelu", {"gelu", "relu"}));
  e.dropout = model.get("dropout", 0.0, Range::closed_open(0.0, 1.0));
  e.bias = model.get("bias", true);
  c.model.positional = parse_positional_kind(model.choice("positional", "learned", {"none", "sinusoidal", "learned", "rotary"}));
  c.model.pooling = parse_pooling(model.choice("pooling", "mean", {"mean", "cls"}));
  c.model.init_from = model.get<std::string>("init_from", "");
  c.model.tie_embeddings = model.get("tie_embeddings", false);
  if (c.model.tie_embeddings && c.model.kind != "causal_lm") {
    model.fail("tie_embeddings", "model.tie_embeddings shares the token embedding with the output layer of a causal_lm; "
                                 "model.kind " + c.model.kind + " has no such layer: remove the key or set it false");
  }
  if (e.d_model % e.n_heads != 0) {
    model.fail("n_heads", "model.n_heads (" + std::to_string(e.n_heads) + ") must divide model.d_model (" + std::to_string(e.d_model) + ")");
  }
  if (c.model.positional == PositionalKind::rotary && (e.d_model / e.n_heads) % 2 != 0) {
    model.fail("positional", "rotary positions need an even head dimension; d_model / n_heads is " + std::to_string(e.d_model / e.n_heads));
  }
  Section attention(model.child("attention"), "model.attention", file, keys);
  e.attention = attention.get<std::string>("name", "softmax");
  e.attention_options = attention.child("options");
  if (keys) keys->push_back("model.attention.options");
  e.config_file = file;
  e.causal = c.model.kind == "causal_lm";
  if (!KernelRegistry::instance().contains(e.attention)) {
    try {
      KernelRegistry::instance().find(e.attention);
    } catch (const std::invalid_argument& error) {
      attention.fail("name", error.what());
    }
  }
  try {
    check_kernel_capabilities(e.attention, KernelSpec{e.n_heads, e.d_model / e.n_heads, 1, e.causal}, false);
  } catch (const std::invalid_argument& error) {
    attention.fail("name", std::string(error.what()) + " (model.kind " + c.model.kind + " is " + (e.causal ? "causal" : "bidirectional") + ")");
  }
  attention.finish();
  model.finish();

  Section train(top.child("train"), "train", file, keys);
  c.train.steps = train.get<std::size_t>("steps", c.train.steps, Range::at_least(1));
  c.train.batch_size = train.get<std::size_t>("batch_size", c.train.batch_size, Range::at_least(1));
  c.train.grad_clip = train.get("grad_clip", c.train.grad_clip, Range::at_least(0.0));
  c.train.eval_interval = train.get<std::size_t>("eval_interval", c.train.eval_interval, Range::at_least(1));
  c.train.eval_batches = train.get<std::size_t>("eval_batches", c.train.eval_batches);
  c.train.final_eval_batches = train.get<std::size_t>("final_eval_batches", c.train.eval_batches);
  auto needs_finite_split = [&](const std::string& key, std::size_t batches) {
    if (batches == 0 && c.task.name != "char_text" && c.task.name != "fashion_mnist") {
      train.fail(key, "train." + key + " 0 means the whole held-out split, which task '" + c.task.name +
                          "' does not have (it generates held-out examples afresh); give a number of batches");
    }
  };
  needs_finite_split("eval_batches", c.train.eval_batches);
  needs_finite_split("final_eval_batches", c.train.final_eval_batches);
  c.train.checkpoint_interval = train.get<std::size_t>("checkpoint_interval", c.train.checkpoint_interval);
  Section opt(train.child("optimizer"), "train.optimizer", file, keys);
  OptimizerConfig& o = c.train.optimizer;
  o.name = opt.choice("name", o.name, {"adamw", "adam", "sgd"});
  o.lr = opt.get("lr", o.lr, Range::greater_than(0.0));
  o.beta1 = opt.get("beta1", o.beta1, Range::closed_open(0.0, 1.0));
  o.beta2 = opt.get("beta2", o.beta2, Range::closed_open(0.0, 1.0));
  o.eps = opt.get("eps", o.eps, Range::greater_than(0.0));
  o.weight_decay = opt.get("weight_decay", o.weight_decay, Range::at_least(0.0));
  std::vector<std::string> default_kinds;
  for (ParamKind kind : o.decay_kinds) default_kinds.push_back(param_kind_name(kind));
  const std::vector<std::string> kinds = opt.choices("decay_kinds", default_kinds, {"weight", "embedding", "bias", "norm"});
  o.decay_kinds.clear();
  for (const std::string& kind : kinds) o.decay_kinds.insert(parse_param_kind(kind));
  if (o.name != "adamw" && o.decay_kinds != std::set<ParamKind>{ParamKind::weight}) {
    opt.fail("decay_kinds", "train.optimizer.decay_kinds chooses what adamw decays; " + o.name +
                                " adds its L2 weight_decay to every parameter: remove the key or use adamw");
  }
  o.momentum = opt.get("momentum", o.momentum, Range::at_least(0.0));
  opt.finish();
  Section sched(train.child("schedule"), "train.schedule", file, keys);
  ScheduleOptions& s = c.train.schedule;
  s.kind = parse_schedule_kind(sched.choice("kind", "constant", {"constant", "warmup_cosine", "warmup_linear"}));
  s.warmup_steps = sched.get<std::size_t>("warmup_steps", 0);
  s.decay_steps = sched.get<std::size_t>("decay_steps", s.kind == ScheduleKind::constant ? 0 : c.train.steps);
  s.min_lr = sched.get("min_lr", 0.0, Range::at_least(0.0));
  s.lr = o.lr;
  try {
    LrSchedule check(s);
  } catch (const std::invalid_argument& error) {
    sched.fail("kind", std::string("train.schedule: ") + error.what());
  }
  sched.finish();
  train.finish();

  Section log(top.child("log"), "log", file, keys);
  c.log.dir = log.get<std::string>("dir", c.log.dir);
  c.log.interval = log.get<std::size_t>("interval", c.log.interval, Range::at_least(1));
  c.log.patterns = log.get("patterns", c.log.patterns);
  c.log.pattern_interval = log.get<std::size_t>("pattern_interval", c.log.pattern_interval);
  c.log.probes = log.get<std::size_t>("probes", c.log.probes, Range::at_least(1));
  log.finish();
  top.finish();

  // The model must read what the task writes.
  if (is_image_task(c.task.name) || c.model.kind == "vit") {
    if (!is_image_task(c.task.name)) model.fail("kind", "model.kind vit needs an image task (task.name quadrants or fashion_mnist)");
    if (c.model.kind != "vit") model.fail("kind", "task '" + c.task.name + "' is made of images; set model.kind: vit");
    const std::size_t side = c.task.name == "quadrants" ? c.task.image_size : 28;
    if (side % c.model.patch_size != 0) {
      model.fail("patch_size", "model.patch_size (" + std::to_string(c.model.patch_size) + ") must divide the image size (" +
                                   std::to_string(side) + "x" + std::to_string(side) + ")");
    }
    e.max_len = (side / c.model.patch_size) * (side / c.model.patch_size) + 1;
  } else if (c.task.name != "char_text") {
    const auto t = data::make_toy_task(c.task.toy);
    const auto formats = t->formats();
    const data::TaskFormat needed = task_format(c.model);
    if (std::find(formats.begin(), formats.end(), needed) == formats.end()) {
      std::string list;
      for (auto f : formats) list += (list.empty() ? "" : ", ") + std::string(f == data::TaskFormat::tagging ? "token_tagger" : f == data::TaskFormat::causal_lm ? "causal_lm" : "sequence_classifier");
      model.fail("kind", "task '" + c.task.name + "' cannot train a " + c.model.kind + "; use model.kind " + list);
    }
    e.max_len = t->max_length(needed);
  } else {
    if (c.model.kind != "causal_lm") model.fail("kind", "task 'char_text' trains a causal_lm; set model.kind: causal_lm");
    e.max_len = c.task.block_size;
  }
  // Build the kernel once now, so that its own options are checked before any training.
  Generator probe(0);
  make_kernel(e.attention, KernelSpec{e.n_heads, e.d_model / e.n_heads, e.max_len, e.causal}, e.attention_options, probe, false, file);
  return c;
}

YAML::Node parse_yaml(const std::string& text, const std::string& file) {
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    return root;
  } catch (const YAML::ParserException& e) {
    // yaml-cpp reports a tab used for indentation in several ways; say it plainly.
    std::string line;
    std::istringstream lines(text);
    for (int i = 0; i <= e.mark.line && std::getline(lines, line); ++i) {
    }
    const bool tab = line.find('\t') != std::string::npos;
    throw ConfigError(file, e.mark.line + 1, e.mark.column + 1,
                      e.msg + (tab ? " (this line holds a tab: YAML indents with spaces only)" : ""));
  }
}

}  // namespace

bool is_image_task(const std::string& name) { return name == "quadrants" || name == "fashion_mnist"; }

data::TaskFormat task_format(const ModelConfig& model) {
  if (model.kind == "causal_lm") return data::TaskFormat::causal_lm;
  if (model.kind == "sequence_classifier" || model.kind == "vit") return data::TaskFormat::classification;
  return data::TaskFormat::tagging;
}

CausalLMConfig causal_lm_config(const ModelConfig& model, std::size_t vocab_size) {
  CausalLMConfig lm;
  lm.vocab_size = vocab_size;
  lm.positional = model.positional;
  lm.encoder = model.encoder;
  lm.tie_embeddings = model.tie_embeddings;
  return lm;
}

ExperimentConfig parse_config(const std::string& yaml_text, const std::string& file, const std::vector<std::string>& overrides) {
  YAML::Node root = parse_yaml(yaml_text, file);
  for (const auto& o : overrides) apply_override(root, o);
  return read(root, file, nullptr);
}

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path, 0, 0, "cannot read the config file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides);
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  read(YAML::Node(YAML::NodeType::Map), "", &keys);
  return keys;
}

std::string config_to_yaml(const ExperimentConfig& c) {
  YAML::Emitter out;
  out.SetDoublePrecision(15);  // decimal values written as they were given (0.1, not 0.10000000000000001)
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.name;
  out << YAML::Key << "seed" << YAML::Value << c.seed;
  out << YAML::Key << "task" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.task.name;
  out << YAML::Key << "length" << YAML::Value << c.task.toy.length;
  out << YAML::Key << "symbols" << YAML::Value << c.task.toy.symbols;
  out << YAML::Key << "pairs" << YAML::Value << c.task.toy.pairs;
  out << YAML::Key << "queries" << YAML::Value << c.task.toy.queries;
  out << YAML::Key << "gap" << YAML::Value << c.task.toy.gap;
  out << YAML::Key << "sequence_length" << YAML::Value << c.task.toy.sequence_length;
  out << YAML::Key << "random_filler" << YAML::Value << c.task.toy.random_filler;
  out << YAML::Key << "held_out_fraction" << YAML::Value << c.task.toy.held_out_fraction;
  out << YAML::Key << "path" << YAML::Value << c.task.path;
  out << YAML::Key << "block_size" << YAML::Value << c.task.block_size;
  out << YAML::Key << "train_fraction" << YAML::Value << c.task.train_fraction;
  out << YAML::Key << "image_size" << YAML::Value << c.task.image_size;
  out << YAML::Key << "flip" << YAML::Value << c.task.augment.flip;
  out << YAML::Key << "shift" << YAML::Value << c.task.augment.shift;
  out << YAML::EndMap;
  const EncoderConfig& e = c.model.encoder;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "kind" << YAML::Value << c.model.kind;
  out << YAML::Key << "patch_size" << YAML::Value << c.model.patch_size;
  out << YAML::Key << "d_model" << YAML::Value << e.d_model;
  out << YAML::Key << "n_heads" << YAML::Value << e.n_heads;
  out << YAML::Key << "n_layers" << YAML::Value << e.n_layers;
  out << YAML::Key << "ff_hidden" << YAML::Value << e.ff_hidden;
  out << YAML::Key << "norm" << YAML::Value << norm_placement_name(e.norm);
  out << YAML::Key << "activation" << YAML::Value << activation_name(e.activation);
  out << YAML::Key << "dropout" << YAML::Value << e.dropout;
  out << YAML::Key << "bias" << YAML::Value << e.bias;
  out << YAML::Key << "positional" << YAML::Value << positional_kind_name(c.model.positional);
  out << YAML::Key << "pooling" << YAML::Value << pooling_name(c.model.pooling);
  out << YAML::Key << "init_from" << YAML::Value << c.model.init_from;
  out << YAML::Key << "tie_embeddings" << YAML::Value << c.model.tie_embeddings;
  out << YAML::Key << "attention" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << e.attention;
  out << YAML::Key << "options" << YAML::Value;
  if (e.attention_options.IsDefined() && !e.attention_options.IsNull()) {
    out << e.attention_options;
  } else {
    out << YAML::Flow << YAML::BeginMap << YAML::EndMap;  // "{}", as a read-back empty map writes itself
  }
  out << YAML::EndMap << YAML::EndMap;
  const TrainConfig& t = c.train;
  out << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "steps" << YAML::Value << t.steps;
  out << YAML::Key << "batch_size" << YAML::Value << t.batch_size;
  out << YAML::Key << "grad_clip" << YAML::Value << t.grad_clip;
  out << YAML::Key << "eval_interval" << YAML::Value << t.eval_interval;
  out << YAML::Key << "eval_batches" << YAML::Value << t.eval_batches;
  out << YAML::Key << "final_eval_batches" << YAML::Value << t.final_eval_batches;
  out << YAML::Key << "checkpoint_interval" << YAML::Value << t.checkpoint_interval;
  out << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << t.optimizer.name;
  out << YAML::Key << "lr" << YAML::Value << t.optimizer.lr;
  out << YAML::Key << "beta1" << YAML::Value << t.optimizer.beta1;
  out << YAML::Key << "beta2" << YAML::Value << t.optimizer.beta2;
  out << YAML::Key << "eps" << YAML::Value << t.optimizer.eps;
  out << YAML::Key << "weight_decay" << YAML::Value << t.optimizer.weight_decay;
  out << YAML::Key << "decay_kinds" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (ParamKind kind : t.optimizer.decay_kinds) out << param_kind_name(kind);
  out << YAML::EndSeq;
  out << YAML::Key << "momentum" << YAML::Value << t.optimizer.momentum;
  out << YAML::EndMap;
  out << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "kind" << YAML::Value << schedule_kind_name(t.schedule.kind);
  out << YAML::Key << "warmup_steps" << YAML::Value << t.schedule.warmup_steps;
  out << YAML::Key << "decay_steps" << YAML::Value << t.schedule.decay_steps;
  out << YAML::Key << "min_lr" << YAML::Value << t.schedule.min_lr;
  out << YAML::EndMap << YAML::EndMap;
  out << YAML::Key << "log" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dir" << YAML::Value << c.log.dir;
  out << YAML::Key << "interval" << YAML::Value << c.log.interval;
  out << YAML::Key << "patterns" << YAML::Value << c.log.patterns;
  out << YAML::Key << "pattern_interval" << YAML::Value << c.log.pattern_interval;
  out << YAML::Key << "probes" << YAML::Value << c.log.probes;
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace attnlab
