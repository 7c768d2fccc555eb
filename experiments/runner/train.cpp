#include "experiments/runner/train.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "datasets/char_text.hpp"
#include "experiments/runner/patterns.hpp"
#include "experiments/runner/process_stats.hpp"
#include "experiments/runner/report.hpp"
#include "framework/io/checkpoint.hpp"
#include "framework/io/image.hpp"
#include "framework/io/npy.hpp"
#include "framework/models/text_models.hpp"
#include "framework/models/vit.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/optim/optimizer.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// The source of batches: a toy task, a text file or images, behind one interface.
class BatchSource {
 public:
  explicit BatchSource(const ExperimentConfig& c) : format_(task_format(c.model)), batch_size_(c.train.batch_size) {
    if (c.task.name == "char_text") {
      text_ = std::make_unique<data::CharTextDataset>(c.task.path, c.task.train_fraction, c.task.block_size);
      block_size_ = c.task.block_size;
    } else if (c.task.name == "quadrants") {
      images_ = data::make_quadrant_task(c.task.image_size);
    } else if (c.task.name == "fashion_mnist") {
      images_ = data::load_idx_dataset(c.task.path, c.task.augment);
    } else {
      task_ = data::make_toy_task(c.task.toy);
    }
  }
  std::size_t vocab_size() const { return task_ ? task_->vocab_size() : text_ ? text_->vocabulary().size() : 0; }
  std::size_t num_classes() const { return task_ ? task_->num_classes() : images_ ? images_->num_classes() : 0; }
  const data::ImageDataset* images() const { return images_.get(); }
  // The characters of a text task's vocabulary in id order (empty for toy tasks).
  std::string vocabulary() const { return text_ ? text_->vocabulary().chars() : ""; }
  bool is_padding(std::int64_t id) const { return task_ && id == data::kPad; }
  // How token `id` at `position` reads on a heatmap's axis: its character for text (whitespace made
  // visible), its id for toy tasks (pad and sep named), "cls" and the patch index for images.
  std::string token_label(std::int64_t id, std::size_t position) const {
    if (images_) return position == 0 ? "cls" : "p" + std::to_string(position - 1);
    if (text_) {
      const char ch = text_->vocabulary().chars().at(static_cast<std::size_t>(id));
      return ch == ' ' ? "\u2423" : ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : std::string(1, ch);
    }
    return id == data::kPad ? "pad" : id == data::kSep ? "sep" : std::to_string(id);
  }
  data::SequenceBatch next(bool held_out, Generator& gen, std::size_t size = 0) const {
    if (!size) size = batch_size_;
    if (task_) return task_->batch(held_out ? data::TaskSplit::held_out : data::TaskSplit::train, format_, size, gen);
    if (images_) {
      const data::ImageBatch b = images_->batch(held_out, size, gen);
      return {b.images, b.labels, Tensor()};
    }
    const data::TokenBatch b = text_->batch(held_out ? data::Split::validation : data::Split::train, size, block_size_, gen);
    return {b.input, b.target, Tensor()};
  }
  // The whole held-out split in order, as batches of up to `size` examples (text: consecutive windows of
  // block_size, the remainder as one shorter window, so every character after the split's first is
  // predicted once). 0 batches when the task generates its held-out examples (no finite split).
  std::size_t held_out_batches(std::size_t size) const {
    if (text_) {
      const std::size_t full = full_windows(), tail = text_tail();
      return (full + size - 1) / size + (tail ? 1 : 0);
    }
    if (images_) return (images_->held_out_size() + size - 1) / size;
    return 0;
  }
  data::SequenceBatch held_out_batch(std::size_t index, std::size_t size) const {
    if (images_) {
      const std::size_t first = index * size;
      const data::ImageBatch b = images_->held_out_examples(first, std::min(size, images_->held_out_size() - first));
      return {b.images, b.labels, Tensor()};
    }
    const std::size_t full = full_windows(), first = index * size;
    const data::TokenBatch b =
        first < full ? text_->windows(data::Split::validation, first * block_size_, std::min(size, full - first), block_size_)
                     : text_->windows(data::Split::validation, full * block_size_, 1, text_tail());  // the tail
    return {b.input, b.target, Tensor()};
  }

 private:
  data::TaskFormat format_;
  std::size_t batch_size_, block_size_ = 0;
  std::unique_ptr<data::SequenceTask> task_;
  std::unique_ptr<data::CharTextDataset> text_;
  std::unique_ptr<data::ImageDataset> images_;
  // Validation text: windows of block_size whose targets fit, and the characters left to predict after them.
  std::size_t full_windows() const { return (text_->size(data::Split::validation) - 1) / block_size_; }
  std::size_t text_tail() const { return (text_->size(data::Split::validation) - 1) % block_size_; }
};

// The model a config names, with one forward from token ids to logits.
class Model {
 public:
  Model(const ExperimentConfig& c, const BatchSource& source, Generator& gen) {
    if (c.model.kind == "vit") {
      ViTConfig v;
      v.image_height = source.images()->height();
      v.image_width = source.images()->width();
      v.channels = source.images()->channels();
      v.patch_size = c.model.patch_size;
      v.num_classes = source.num_classes();
      v.encoder = c.model.encoder;
      vit_ = std::make_shared<ViT>(v, gen);
      module_ = vit_.get();
    } else if (c.model.kind == "causal_lm") {
      causal_ = std::make_shared<CausalLM>(causal_lm_config(c.model, source.vocab_size()), gen);
      module_ = causal_.get();
    } else {
      ClassifierConfig cc;
      cc.vocab_size = source.vocab_size();
      cc.positional = c.model.positional;
      cc.pooling = c.model.pooling;
      cc.encoder = c.model.encoder;
      if (c.model.kind == "token_tagger") {
        cc.num_classes = source.vocab_size();
        tagger_ = std::make_shared<TokenClassifier>(cc, gen);
        module_ = tagger_.get();
      } else {
        cc.num_classes = source.num_classes();
        classifier_ = std::make_shared<SequenceClassifier>(cc, gen);
        module_ = classifier_.get();
      }
    }
  }
  Tensor forward(const data::SequenceBatch& b) {
    if (vit_) return vit_->forward(b.input);
    if (causal_) return causal_->forward(b.input);
    if (tagger_) return tagger_->forward(b.input, b.key_padding_mask);
    return classifier_->forward(b.input, b.key_padding_mask);
  }
  Module& module() { return *module_; }
  CausalLM* causal() { return causal_.get(); }
  // Every layer's pattern [B, H, Tq, Tk] for a batch (no gradient; the caller sets eval mode).
  std::vector<Tensor> patterns(const data::SequenceBatch& b) {
    EncoderOutput out;
    if (vit_) {
      vit_->forward(b.input, &out, true);
    } else if (causal_) {
      out = causal_->forward_with_patterns(b.input, nullptr);
    } else if (tagger_) {
      tagger_->forward(b.input, b.key_padding_mask, &out, true);
    } else {
      classifier_->forward(b.input, b.key_padding_mask, &out, true);
    }
    return out.patterns;
  }

 private:
  std::shared_ptr<CausalLM> causal_;
  std::shared_ptr<TokenClassifier> tagger_;
  std::shared_ptr<SequenceClassifier> classifier_;
  std::shared_ptr<ViT> vit_;
  Module* module_ = nullptr;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& o, Module& model) {
  if (o.name == "sgd") {
    SGDOptions s;
    s.lr = o.lr;
    s.momentum = o.momentum;
    s.weight_decay = o.weight_decay;
    return std::make_unique<SGD>(model.named_parameters(), s);
  }
  if (o.name == "adam") {
    AdamOptions a;
    a.lr = o.lr, a.beta1 = o.beta1, a.beta2 = o.beta2, a.eps = o.eps, a.weight_decay = o.weight_decay;
    return std::make_unique<Adam>(model.named_parameters(), a);
  }
  AdamWOptions a;
  a.lr = o.lr, a.beta1 = o.beta1, a.beta2 = o.beta2, a.eps = o.eps, a.weight_decay = o.weight_decay;
  a.decay_kinds = o.decay_kinds;
  return std::make_unique<AdamW>(model.named_parameters(), a);
}

// A fresh folder log.dir/name, or name-2, name-3, ... when taken.
std::string make_run_dir(const ExperimentConfig& c) {
  fs::create_directories(c.log.dir);
  fs::path dir = fs::path(c.log.dir) / c.name;
  for (int i = 2; fs::exists(dir); ++i) dir = fs::path(c.log.dir) / (c.name + "-" + std::to_string(i));
  fs::create_directory(dir);
  return dir.string();
}

std::string clock_time() {
  const std::time_t now = std::time(nullptr);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, "%H:%M:%S", std::localtime(&now));
  return buffer;
}

struct Evaluation {
  double loss = 0;
  data::SequenceMetrics metrics;
};

// Loss and metrics on the held-out split: `batches` random batches (the same ones every time, drawn
// from `seed`), or with batches 0 the whole split in order. The loss is the mean over scored tokens.
Evaluation evaluate(Model& model, const BatchSource& source, std::size_t batches, std::size_t batch_size, std::uint64_t seed) {
  NoGradGuard no_grad;
  model.module().eval();
  Generator gen(seed);
  const bool whole = batches == 0;
  if (whole) {
    batches = source.held_out_batches(batch_size);
    if (batches == 0) throw std::invalid_argument("the held-out split has nothing to predict; use more text or a larger split");
  }
  Evaluation e;
  double loss = 0, correct = 0, exact = 0, rows = 0;
  for (std::size_t i = 0; i < batches; ++i) {
    const data::SequenceBatch b = whole ? source.held_out_batch(i, batch_size) : source.next(true, gen, batch_size);
    const Tensor logits = model.forward(b);
    const data::SequenceMetrics m = data::sequence_metrics(logits, b.target);
    if (m.scored_tokens) loss += cross_entropy(logits, b.target, data::kIgnore).item() * static_cast<double>(m.scored_tokens);
    correct += m.token_accuracy * static_cast<double>(m.scored_tokens);
    e.metrics.scored_tokens += m.scored_tokens;
    exact += m.exact_match * static_cast<double>(b.input.size(0));
    rows += static_cast<double>(b.input.size(0));
  }
  const double scored = static_cast<double>(e.metrics.scored_tokens);
  e.loss = scored ? loss / scored : 0;
  e.metrics.token_accuracy = scored ? correct / scored : 0;
  e.metrics.exact_match = rows ? exact / rows : 0;
  model.module().train();
  return e;
}

// Runs the probes, saves every pattern as .npy under run_dir/patterns, and logs each head's metrics.
void capture_patterns(Model& model, const BatchSource& source, const data::SequenceBatch& probes, std::size_t step,
                      const std::string& run_dir, std::ofstream& jsonl) {
  const bool tokens_are_ids = !source.images();
  NoGradGuard no_grad;
  model.module().eval();
  const std::vector<Tensor> layers = model.patterns(probes);
  model.module().train();
  if (layers.empty() || !layers[0].defined()) return;  // a kernel without patterns
  const std::string dir = run_dir + "/patterns";
  fs::create_directories(dir);
  const std::size_t count = layers[0].size(0), heads = layers[0].size(1), tq = layers[0].size(2), tk = layers[0].size(3);
  const Tensor stacked = concat([&] {
    std::vector<Tensor> v;
    for (const Tensor& l : layers) v.push_back(unsqueeze(l.to(DType::float32), 0));
    return v;
  }(), 0);  // [L, B, H, Tq, Tk]
  for (std::size_t p = 0; p < count; ++p) {
    const Tensor probe = reshape(slice(stacked, 1, static_cast<std::int64_t>(p), static_cast<std::int64_t>(p) + 1),
                                 {static_cast<std::int64_t>(layers.size()), static_cast<std::int64_t>(heads),
                                  static_cast<std::int64_t>(tq), static_cast<std::int64_t>(tk)});
    const std::string base = dir + "/step_" + std::to_string(step) + "_probe_" + std::to_string(p);
    write_npy(base + ".npy", probe);
    write_pattern_png(base + ".png", probe);
    const std::string tokens_file = dir + "/probe_" + std::to_string(p) + "_tokens.npy";
    if (tokens_are_ids && !fs::exists(tokens_file)) write_npy(tokens_file, slice(probes.input, 0, static_cast<std::int64_t>(p), static_cast<std::int64_t>(p) + 1));
    const std::string labels_file = dir + "/probe_" + std::to_string(p) + "_labels.txt";
    if (!fs::exists(labels_file)) {  // the axis labels of the reports, one per key position
      std::ofstream labels(labels_file);
      for (std::size_t i = 0; i < tk; ++i)
        labels << source.token_label(tokens_are_ids ? probes.input.data<std::int64_t>()[p * tk + i] : 0, i) << "\n";
    }
  }
  std::vector<std::vector<std::int64_t>> tokens(count);  // each probe's key tokens, for the induction score
  if (tokens_are_ids) {
    const std::int64_t* ids = probes.input.data<std::int64_t>();
    for (std::size_t p = 0; p < count; ++p) {
      tokens[p].assign(ids + p * tk, ids + (p + 1) * tk);
      for (std::int64_t& t : tokens[p])
        if (source.is_padding(t)) t = -1;  // never an earlier occurrence of anything
    }
  }
  std::string row = "{\"step\": " + std::to_string(step) + ", \"split\": \"patterns\", \"heads\": [";
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::vector<double> values = layers[l].to_vector();
    for (std::size_t h = 0; h < heads; ++h) {
      HeadMetrics mean;
      for (std::size_t p = 0; p < count; ++p) {
        const HeadMetrics m = head_metrics(values.data() + ((p * heads) + h) * tq * tk, tq, tk, tokens[p]);
        mean.entropy += m.entropy / count, mean.mean_distance += m.mean_distance / count, mean.diagonal += m.diagonal / count;
        mean.previous_token += m.previous_token / count, mean.anti_diagonal += m.anti_diagonal / count;
        mean.induction += m.induction / count;
      }
      char head[320];
      std::snprintf(head, sizeof head,
                    "%s{\"layer\": %zu, \"head\": %zu, \"entropy\": %.4f, \"mean_distance\": %.4f, \"diagonal\": %.4f, "
                    "\"previous_token\": %.4f, \"anti_diagonal\": %.4f, \"induction\": %.4f}",
                    l || h ? ", " : "", l, h, mean.entropy, mean.mean_distance, mean.diagonal, mean.previous_token,
                    mean.anti_diagonal, mean.induction);
      row += head;
    }
  }
  jsonl << row << "]}\n";
  jsonl.flush();
}

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

// Everything a run needs to continue exactly where it stopped.
Checkpoint make_checkpoint(const ExperimentConfig& c, Module& model, const Optimizer& optimizer, const Generator& data_gen,
                           std::size_t step, double running, std::size_t running_count, double best_eval,
                           double train_seconds, const std::string& vocabulary) {
  Checkpoint ck;
  for (const auto& [name, t] : model.state_dict()) ck.tensors["model." + name] = t;
  for (const auto& [name, t] : optimizer.state_dict()) ck.tensors["optim." + name] = t;
  const std::vector<std::int64_t> rng = data_gen.state();
  ck.tensors["rng.data"] = from_indices(rng, {rng.size()});
  ck.tensors["step"] = from_indices({static_cast<std::int64_t>(step)}, {});
  ck.tensors["running_loss"] = from_vector({running, static_cast<double>(running_count), best_eval, train_seconds}, {4}, DType::float64);
  ck.texts["config"] = config_to_yaml(c);
  ck.texts["vocabulary"] = vocabulary;
  return ck;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

// The run's report.html; a failure to write it is reported and does not fail the run.
void write_report(const std::string& run_dir) {
  try {
    write_run_report(run_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: warning: report.html not written: %s\n", e.what());
  }
}

std::map<std::string, Tensor> with_prefix(const Checkpoint& ck, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : ck.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace(name.substr(prefix.size()), t);
  return out;
}

}  // namespace

TrainResult train_experiment(const ExperimentConfig& c, int threads, const std::string& resume_dir) {
  set_num_threads(threads);
  BatchSource source(c);  // data first: a missing text file fails before a run folder exists
  Generator init(c.seed), data_gen(c.seed + 1);
  Model model(c, source, init);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(c.train.optimizer, model.module());
  ScheduleOptions schedule_options = c.train.schedule;
  schedule_options.lr = c.train.optimizer.lr;
  const LrSchedule schedule(schedule_options);

  TrainResult result;
  std::size_t first_step = 1;
  double running = 0, best_eval = std::numeric_limits<double>::infinity();
  double earlier_seconds = 0;  // training time before a resume
  std::size_t running_count = 0;
  if (!resume_dir.empty()) {
    result.run_dir = resume_dir;
    const Checkpoint ck = load_checkpoint(resume_dir + "/last.ckpt");
    model.module().load_state_dict(with_prefix(ck, "model."));
    optimizer->load_state_dict(with_prefix(ck, "optim."));
    const Tensor rng = ck.tensors.at("rng.data");
    data_gen.set_state(std::vector<std::int64_t>(rng.data<std::int64_t>(), rng.data<std::int64_t>() + rng.numel()));
    first_step = static_cast<std::size_t>(ck.tensors.at("step").item()) + 1;
    if (first_step > c.train.steps) {
      throw std::invalid_argument("the run in " + resume_dir + " is already at step " + std::to_string(first_step - 1) +
                                  "; to train further set train.steps above it (attnlab train --resume " + resume_dir +
                                  " train.steps=N)");
    }
    const auto saved = ck.tensors.at("running_loss").to_vector();
    running = saved[0];
    running_count = static_cast<std::size_t>(saved[1]);
    best_eval = saved[2];
    if (saved.size() > 3) earlier_seconds = saved[3];
    std::ofstream(result.run_dir + "/config.yaml") << config_to_yaml(c);  // with any new overrides (train.steps)
    fs::remove(result.run_dir + "/summary.json");  // unfinished again until the new last step
  } else {
    if (!c.model.init_from.empty()) {
      try {
        model.module().load_weights(import_npy_folder(c.model.init_from));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("model.init_from " + c.model.init_from + ": " + e.what());
      }
    }
    result.run_dir = make_run_dir(c);
    std::ofstream(result.run_dir + "/config.yaml") << config_to_yaml(c);
    std::ofstream(result.run_dir + "/metrics.csv") << "step,split,loss,token_accuracy,exact_match,lr,tokens_per_s,elapsed_s\n";
  }
  std::ofstream jsonl(result.run_dir + "/metrics.jsonl", std::ios::app), csv(result.run_dir + "/metrics.csv", std::ios::app);
  std::printf("attnlab: %s %s (%zu parameters) %s step %zu to %zu; run folder %s\n", resume_dir.empty() ? "training" : "resuming",
              c.name.c_str(), model.module().parameter_count(), resume_dir.empty() ? "from" : "at", first_step, c.train.steps,
              result.run_dir.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  // Seconds of this session, and of the whole run across resumes.
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto run_seconds = [&] { return earlier_seconds + elapsed(); };
  auto save = [&](const std::string& file, std::size_t step) {
    save_checkpoint(result.run_dir + "/" + file,
                    make_checkpoint(c, model.module(), *optimizer, data_gen, step, running, running_count, best_eval,
                                    run_seconds(), source.vocabulary()));
  };
  // Fixed probes from the held-out split; patterns are captured only at capture steps, never otherwise.
  data::SequenceBatch probes;
  if (c.log.patterns) {
    Generator probe_gen(c.seed + 3);
    probes = source.next(true, probe_gen, c.log.probes);
  }
  g_interrupted = false;
  struct SigintHandler {  // Ctrl-C finishes the step; the previous handler comes back however we leave
    void (*previous)(int) = std::signal(SIGINT, on_interrupt);
    ~SigintHandler() { std::signal(SIGINT, previous); }
  } sigint;
  const bool terminal = isatty(fileno(stdout));  // a progress bar there; timestamped lines in logs and pipes
  double last_bar = -1;
  bool bar_open = false;  // the cursor is at the end of the progress bar: end that line before printing
  std::string last_metric = "held-out acc -";
  auto end_bar = [&] {
    if (bar_open) std::printf("\n");
    bar_open = false;
  };

  Evaluation last_eval;     // the latest periodic evaluation (always one at the last step)
  std::size_t tokens = 0;  // read by the model in this session
  auto log_row = [&](std::size_t step, const char* split, double loss, const data::SequenceMetrics* m, double lr) {
    const double rate = elapsed() > 0 ? static_cast<double>(tokens) / elapsed() : 0, seconds = run_seconds();
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"step\": %zu, \"split\": \"%s\", \"loss\": %.6g, \"token_accuracy\": %s, \"exact_match\": %s, "
                  "\"lr\": %.6g, \"tokens_per_s\": %.1f, \"elapsed_s\": %.3f}",
                  step, split, loss, m ? std::to_string(m->token_accuracy).c_str() : "null",
                  m ? std::to_string(m->exact_match).c_str() : "null", lr, rate, seconds);
    jsonl << line << "\n";
    csv << step << "," << split << "," << loss << "," << (m ? std::to_string(m->token_accuracy) : "") << ","
        << (m ? std::to_string(m->exact_match) : "") << "," << lr << "," << rate << "," << seconds << "\n";
    jsonl.flush();
    csv.flush();
  };

  for (std::size_t step = first_step; step <= c.train.steps; ++step) {
    const double lr = schedule.lr_at(step - 1);
    optimizer->set_lr(lr);
    const data::SequenceBatch batch = source.next(false, data_gen);
    Tensor loss = cross_entropy(model.forward(batch), batch.target, data::kIgnore);
    loss.backward();
    const double value = loss.item();
    const double norm = c.train.grad_clip > 0 ? clip_grad_norm(model.module().parameters(), c.train.grad_clip)
                                              : clip_grad_norm(model.module().parameters(), INFINITY);
    if (!std::isfinite(value) || !std::isfinite(norm)) {
      // Stop before the step: the parameters and last.ckpt stay as they were.
      std::string culprit;
      for (const auto& p : model.module().named_parameters()) {
        const Tensor g = p.tensor.grad();
        if (!g.defined()) continue;
        for (double x : g.to_vector())
          if (!std::isfinite(x)) {
            culprit = p.name;
            break;
          }
        if (!culprit.empty()) break;
      }
      throw std::runtime_error("training stopped at step " + std::to_string(step) + ": the loss is " + std::to_string(value) +
                               (culprit.empty() ? "" : " and the gradient of " + culprit + " is not finite") +
                               "; the last checkpoint is kept. Lower train.optimizer.lr or set train.grad_clip");
    }
    optimizer->step();
    optimizer->zero_grad();  // free the gradients now: the next forward runs without them
    // Tokens the model reads: for images, the patches and the CLS token of each image.
    tokens += source.images() ? batch.input.size(0) * c.model.encoder.max_len : batch.input.numel();
    running += value;
    ++running_count;
    result.final_train_loss = value;
    const double seconds = elapsed();
    const double rate = static_cast<double>(tokens) / std::max(seconds, 1e-9);
    const double eta = seconds / static_cast<double>(step - first_step + 1) * static_cast<double>(c.train.steps - step);
    if (terminal && (seconds - last_bar >= 0.1 || step == c.train.steps)) {
      // On a terminal: one line redrawn in place.
      const int width = 24, filled = static_cast<int>(width * static_cast<double>(step) / static_cast<double>(c.train.steps));
      std::printf("\r[%s%s] %zu/%zu  loss %.4f  %s  %.0f tok/s  eta %.0fs   ", std::string(filled, '#').c_str(),
                  std::string(width - filled, '.').c_str(), step, c.train.steps, value, last_metric.c_str(), rate, eta);
      std::fflush(stdout);
      last_bar = seconds;
      bar_open = true;
    }
    if (step % c.log.interval == 0 || step == c.train.steps) {
      const double mean_loss = running / static_cast<double>(running_count);
      log_row(step, "train", mean_loss, nullptr, lr);
      if (!terminal) {
        std::printf("[%s] step %zu/%zu  loss %.4f  lr %.3g  %.0f tok/s  eta %.0fs\n", clock_time().c_str(), step,
                    c.train.steps, mean_loss, lr, rate, eta);
        std::fflush(stdout);
      }
      running = 0;
      running_count = 0;
    }
    if (step % c.train.eval_interval == 0 || step == c.train.steps) {
      const Evaluation e = evaluate(model, source, c.train.eval_batches, c.train.batch_size, c.seed + 2);
      last_eval = e;
      if (e.loss < best_eval) {
        best_eval = e.loss;
        save("best.ckpt", step);
      }
      log_row(step, "eval", e.loss, &e.metrics, lr);
      end_bar();
      std::printf("[%s] eval at step %zu: loss %.4f  token accuracy %.2f%%  exact match %.2f%%\n", clock_time().c_str(), step, e.loss, 100 * e.metrics.token_accuracy, 100 * e.metrics.exact_match);
      char metric[64];
      std::snprintf(metric, sizeof metric, "held-out acc %.1f%%", 100 * e.metrics.token_accuracy);
      last_metric = metric;
      std::fflush(stdout);
    }
    const std::size_t pattern_every = c.log.pattern_interval ? c.log.pattern_interval : c.train.eval_interval;
    if (c.log.patterns && (step % pattern_every == 0 || step == c.train.steps)) {
      capture_patterns(model, source, probes, step, result.run_dir, jsonl);
    }
    if (step == c.train.steps || (c.train.checkpoint_interval && step % c.train.checkpoint_interval == 0)) save("last.ckpt", step);
    if (g_interrupted && step < c.train.steps) {
      save("last.ckpt", step);
      end_bar();
      std::printf("attnlab: interrupted after step %zu; checkpoint written. Resume with: attnlab train --resume %s\n", step,
                  result.run_dir.c_str());
      result.interrupted = true;
      write_report(result.run_dir);
      return result;
    }
  }
  // The figure to report: final_eval_batches held-out batches, or the whole split when 0 (the last
  // periodic evaluation again when they agree). Logged as split "final"; best.ckpt is chosen by the
  // periodic evaluations alone, which all see the same batches.
  const Evaluation final_eval = c.train.final_eval_batches == c.train.eval_batches
                                    ? last_eval
                                    : evaluate(model, source, c.train.final_eval_batches, c.train.batch_size, c.seed + 2);
  log_row(c.train.steps, "final", final_eval.loss, &final_eval.metrics, schedule.lr_at(c.train.steps - 1));
  end_bar();
  std::printf("[%s] final evaluation (%s, %zu scored tokens): loss %.4f  token accuracy %.2f%%  exact match %.2f%%\n",
              clock_time().c_str(), c.train.final_eval_batches ? "sampled batches" : "the whole held-out split",
              final_eval.metrics.scored_tokens, final_eval.loss, 100 * final_eval.metrics.token_accuracy,
              100 * final_eval.metrics.exact_match);
  result.final_eval_loss = final_eval.loss;
  result.final_token_accuracy = final_eval.metrics.token_accuracy;
  result.final_exact_match = final_eval.metrics.exact_match;
  result.final_scored_tokens = final_eval.metrics.scored_tokens;
  // summary.json marks the run finished (attnlab compare reads it); the report is rebuilt from the folder.
  char summary[768];
  std::snprintf(summary, sizeof summary,
                "{\"name\": \"%s\", \"status\": \"finished\", \"steps\": %zu, \"params\": %zu, \"train_seconds\": %.3f, "
                "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"final_eval_loss\": %.6g, \"final_token_accuracy\": %.6f, "
                "\"final_exact_match\": %.6f, \"final_scored_tokens\": %zu, \"best_eval_loss\": %.6g}\n",
                json_escape(c.name).c_str(), c.train.steps, model.module().parameter_count(), run_seconds(),
                static_cast<double>(tokens) / std::max(elapsed(), 1e-9), peak_rss_mb(), result.final_eval_loss,
                result.final_token_accuracy, result.final_exact_match, result.final_scored_tokens, best_eval);
  write_file_atomic(result.run_dir + "/summary.json", summary);
  write_report(result.run_dir);
  std::printf("attnlab: done in %.1fs; results in %s (report.html)\n", elapsed(), result.run_dir.c_str());
  return result;
}

namespace {

// A run's config and the chosen checkpoint, loaded into a freshly built model.
struct LoadedRun {
  ExperimentConfig config;
  Checkpoint checkpoint;
};

LoadedRun load_run(const std::string& run_dir, const std::string& which) {
  if (which != "best" && which != "last") throw std::invalid_argument("--checkpoint must be best or last, got " + which);
  LoadedRun r;
  r.config = load_config(run_dir + "/config.yaml");
  r.checkpoint = load_checkpoint(run_dir + "/" + which + ".ckpt");
  return r;
}

}  // namespace

int evaluate_run(const std::string& run_dir, const std::string& which, int threads) {
  set_num_threads(threads);
  const LoadedRun run = load_run(run_dir, which);
  BatchSource source(run.config);
  Generator init(run.config.seed);
  Model model(run.config, source, init);
  model.module().load_state_dict(with_prefix(run.checkpoint, "model."));
  const Evaluation e = evaluate(model, source, run.config.train.final_eval_batches, run.config.train.batch_size, run.config.seed + 2);
  std::printf("{\"run\": \"%s\", \"checkpoint\": \"%s\", \"step\": %lld, \"loss\": %.6g, \"token_accuracy\": %.6f, "
              "\"exact_match\": %.6f, \"scored_tokens\": %zu}\n",
              run_dir.c_str(), which.c_str(), static_cast<long long>(run.checkpoint.tensors.at("step").item()), e.loss,
              e.metrics.token_accuracy, e.metrics.exact_match, e.metrics.scored_tokens);
  return 0;
}

int export_run(const std::string& run_dir, const std::string& which, const std::string& out_dir) {
  const LoadedRun run = load_run(run_dir, which);
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : with_prefix(run.checkpoint, "model."))
    if (is_floating(t.dtype())) weights.emplace(name, t);
  export_npy_folder(out_dir, weights, run.checkpoint.texts.at("config"));
  std::printf("attnlab: %zu tensors of %s (%s checkpoint) written to %s\n", weights.size(), run_dir.c_str(), which.c_str(),
              out_dir.c_str());
  return 0;
}

int sample_run(const std::string& run_dir, const SampleOptions& o, int threads) {
  set_num_threads(threads);
  const LoadedRun run = load_run(run_dir, o.checkpoint);
  if (run.config.model.kind != "causal_lm") {
    throw std::invalid_argument("attnlab sample needs a causal_lm run; " + run_dir + " trained a " + run.config.model.kind);
  }
  const std::string chars = run.checkpoint.texts.count("vocabulary") ? run.checkpoint.texts.at("vocabulary") : "";
  CausalLMConfig lm = causal_lm_config(run.config.model, 0);
  std::vector<std::int64_t> prompt;
  data::CharVocabulary vocabulary;
  if (!chars.empty()) {
    vocabulary = data::CharVocabulary::from_chars(chars);
    lm.vocab_size = vocabulary.size();
    prompt = vocabulary.encode(o.prompt.empty() ? std::string(1, chars[0]) : o.prompt);
  } else {
    lm.vocab_size = data::make_toy_task(run.config.task.toy)->vocab_size();
    std::stringstream ss(o.prompt);
    for (std::int64_t id; ss >> id;) prompt.push_back(id);
    if (prompt.empty()) prompt.push_back(data::kSep);
  }
  Generator init(run.config.seed), gen(o.seed);
  CausalLM model(lm, init);
  model.load_state_dict(with_prefix(run.checkpoint, "model."));
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
