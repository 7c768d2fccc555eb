// Grokking explained (Nanda et al. 2023, "Progress measures for grokking via mechanistic
// interpretability"), for the modular task: which Fourier frequencies of Z_p carry the token
// embedding's norm (the key frequencies), and, over the checkpoints the run kept, the progress
// measures: the restricted loss (the logits with only the key frequencies of a + b kept) and the
// excluded loss (with them removed, on the training pairs). docs/analysis.md gives the definitions.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <regex>

#include "experiments/analysis/part.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/checkpoint.hpp"

namespace attnlab {

std::vector<double> fourier_spectrum(const std::vector<double>& embedding, std::size_t p, std::size_t width) {
  const double pi = std::acos(-1.0);
  std::vector<double> power(p / 2 + 1, 0.0);
  for (std::size_t c = 0; c < width; ++c) {
    for (std::size_t k = 0; k <= p / 2; ++k) {
      double re = 0, im = 0;
      for (std::size_t a = 0; a < p; ++a) {
        const double angle = 2 * pi * static_cast<double>(k * a % p) / static_cast<double>(p);
        re += embedding[a * width + c] * std::cos(angle), im += embedding[a * width + c] * std::sin(angle);
      }
      // |DFT_k|^2 counts frequency k once and its mirror p - k once (Parseval), except 0 and p / 2.
      const bool single = k == 0 || 2 * k == p;
      power[k] += (re * re + im * im) * (single ? 1.0 : 2.0) / static_cast<double>(p);
    }
  }
  const double total = std::accumulate(power.begin(), power.end(), 0.0);
  for (double& x : power) x = total > 0 ? x / total : NAN;
  return power;
}

std::vector<std::size_t> key_frequencies(const std::vector<double>& shares) {
  const std::size_t n = shares.size() - 1;  // the non-constant frequencies 1 .. p/2
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 1);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return shares[x] > shares[y]; });
  const double varying = 1.0 - shares[0];
  std::vector<std::size_t> keys;
  for (std::size_t k : order) {
    if (keys.size() == 10 || !(shares[k] > 2.0 * varying / static_cast<double>(n))) break;
    keys.push_back(k);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

FourierLosses fourier_losses(const std::vector<double>& logits, const std::vector<ModularPair>& pairs, std::size_t p, int sign,
                             const std::vector<std::size_t>& keys) {
  const double pi = std::acos(-1.0);
  const std::size_t n = pairs.size();
  // Per output c, the projection of its logit column onto cos and sin of w_k (a + sign b), for each key k.
  std::vector<double> kept(n * p, 0.0);
  for (std::size_t k : keys) {
    std::vector<double> cos_k(n), sin_k(n);
    double cc = 0, ss = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t sum = (pairs[i].a + (sign >= 0 ? pairs[i].b : p - pairs[i].b)) % p;
      const double angle = 2 * pi * static_cast<double>(k * sum % p) / static_cast<double>(p);
      cos_k[i] = std::cos(angle), sin_k[i] = std::sin(angle);
      cc += cos_k[i] * cos_k[i], ss += sin_k[i] * sin_k[i];
    }
    for (std::size_t c = 0; c < p; ++c) {
      double x = 0, y = 0;
      for (std::size_t i = 0; i < n; ++i) x += logits[i * p + c] * cos_k[i], y += logits[i * p + c] * sin_k[i];
      for (std::size_t i = 0; i < n; ++i)
        kept[i * p + c] += (cc > 1e-9 ? x / cc * cos_k[i] : 0.0) + (ss > 1e-9 ? y / ss * sin_k[i] : 0.0);
    }
  }
  std::vector<double> mean(p, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < p; ++c) mean[c] += logits[i * p + c] / static_cast<double>(n);
  const auto loss = [&](std::size_t i, const auto& logit) {  // cross-entropy of row i's answer
    double top = -INFINITY, total = 0;
    for (std::size_t c = 0; c < p; ++c) top = std::max(top, logit(c));
    for (std::size_t c = 0; c < p; ++c) total += std::exp(logit(c) - top);
    return top + std::log(total) - logit(static_cast<std::size_t>(pairs[i].answer));
  };
  FourierLosses out;
  double restricted = 0, excluded = 0, trained = 0;
  for (std::size_t i = 0; i < n; ++i) {
    restricted += loss(i, [&](std::size_t c) { return mean[c] + kept[i * p + c]; });
    if (!pairs[i].train) continue;
    excluded += loss(i, [&](std::size_t c) { return logits[i * p + c] - kept[i * p + c]; });
    trained += 1;
  }
  out.restricted = restricted / static_cast<double>(n);
  out.excluded = trained ? excluded / trained : NAN;
  return out;
}

namespace {

namespace fs = std::filesystem;

// The answer logits of every pair (the p outputs at "="), with the pairs, training ones first.
// `losses` receives each pair's cross-entropy over every output the model has (its p numbers and "="), the
// loss training and evaluation report; the returned logits are the p numbers' alone, the Fourier basis's.
std::vector<double> all_logits(Model& model, const data::DataSource& data, std::size_t p, std::vector<ModularPair>& pairs,
                               std::vector<double>& losses) {
  EvalScope scope(model);
  std::vector<double> logits;
  pairs.clear();
  losses.clear();
  for (data::TaskSplit split : {data::TaskSplit::train, data::TaskSplit::held_out}) {
    Generator gen(0);
    const Batch b = data.sample(split, p * p, gen);  // the whole split
    const Tensor out = model.forward(b).logits;      // [N, 3, V]
    const std::size_t rows = b.input.size(0), v = out.size(2);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::int64_t* in = b.input.data<std::int64_t>() + r * 3;
      pairs.push_back({static_cast<std::size_t>(in[0]), static_cast<std::size_t>(in[1]), b.target.data<std::int64_t>()[r * 3 + 2],
                       split == data::TaskSplit::train});
      for (std::size_t c = 0; c < p; ++c) logits.push_back(element(out, (r * 3 + 2) * v + c));
      double top = -INFINITY, sum = 0;
      for (std::size_t c = 0; c < v; ++c) top = std::max(top, element(out, (r * 3 + 2) * v + c));
      for (std::size_t c = 0; c < v; ++c) sum += std::exp(element(out, (r * 3 + 2) * v + c) - top);
      losses.push_back(top + std::log(sum) - element(out, (r * 3 + 2) * v + static_cast<std::size_t>(pairs.back().answer)));
    }
  }
  return logits;
}

// The split's mean loss (the training or the held-out pairs), over the model's every output, as
// metrics.jsonl and `attnlab eval` have it (found in review: it left "=" out of the softmax).
double split_loss(const std::vector<double>& losses, const std::vector<ModularPair>& pairs, bool train) {
  double total = 0, count = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i)
    if (pairs[i].train == train) total += losses[i], count += 1;
  return count ? total / count : NAN;
}

std::vector<double> token_embedding(const Model& model, std::size_t p, std::size_t& width) {
  for (const auto& [name, t] : model.state_dict()) {
    if (name.size() < 10 || name.compare(name.size() - 10, 10, "tok.weight") != 0) continue;
    width = t.size(1);
    const std::vector<double> all = t.to_vector();
    return std::vector<double>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(p * width));
  }
  throw std::invalid_argument("the model has no token embedding (tok.weight)");
}

// The checkpoints the run kept (train.keep_checkpoints: checkpoints/step_N.ckpt), by step, as file names;
// other files there are not the run's and are left alone.
std::vector<std::pair<std::size_t, std::string>> kept_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<std::size_t, std::string>> out;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir)) return out;
  const std::regex kept("step_([0-9]{1,18})\\.ckpt");
  std::smatch m;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, kept)) out.emplace_back(std::stoull(m[1]), name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void progress_measures(Model& model, const data::DataSource& data, const std::string& run_dir, const std::vector<std::size_t>& keys,
                       AnalysisResult& out) {
  const data::DataSource::Modular m = data.modular();
  const auto checkpoints = kept_checkpoints(run_dir);
  if (checkpoints.empty()) {
    out.notes.push_back("fourier: no progress measures: the run kept no checkpoints (train.keep_checkpoints with train.checkpoint_interval)");
    return;
  }
  const std::map<std::string, Tensor> analysed = model.state_dict();
  std::map<std::string, Tensor> saved;
  for (const auto& [name, t] : analysed) saved.emplace(name, t.clone());
  std::vector<std::string> rows;
  std::vector<double> values;
  for (const auto& [step, file] : checkpoints) {
    load_run_model(model, load_kept_checkpoint(run_dir, file), &data);  // another run's file is refused, naming it
    std::vector<ModularPair> pairs;
    std::vector<double> losses;
    const std::vector<double> logits = all_logits(model, data, m.p, pairs, losses);
    const FourierLosses f = fourier_losses(logits, pairs, m.p, m.sign, keys);
    std::size_t width = 0;
    const std::vector<double> embedding = token_embedding(model, m.p, width);  // sets width: not in the same call
    const std::vector<double> shares = fourier_spectrum(embedding, m.p, width);
    double key_share = 0;
    for (std::size_t k : keys) key_share += shares[k];
    rows.push_back(std::to_string(step));
    values.insert(values.end(), {split_loss(losses, pairs, true), split_loss(losses, pairs, false), f.restricted, f.excluded, key_share});
  }
  model.load_state_dict(saved);
  out.add({"fourier_progress", "fourier",
           "Progress measures over the kept checkpoints: training and held-out loss, restricted loss (only the key frequencies of the "
           "logits kept, every pair), excluded loss (the key frequencies removed, training pairs) and the key frequencies' share of the "
           "embedding",
           "step", "measure", rows, {"train_loss", "held_out_loss", "restricted_loss", "excluded_loss", "key_share"}, values, false, false, 0});
}

class FourierPart {
 public:
  static constexpr const char* kName = "fourier";
  static constexpr const char* kDescription =
      "modular task: the Fourier spectrum of the token embedding (its key frequencies) and Nanda et al.'s progress measures over the kept "
      "checkpoints";
  static constexpr const char* kTitle = "Fourier analysis of modular arithmetic: key frequencies and progress measures";
  static constexpr int kOrder = 80;
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static std::string needs(const Model& model, const data::DataSource& data) {
    if (data.modular().p == 0) return "the modular task (its tokens are the integers modulo p)";
    return model.predicts_next_token() ? "" : "a causal LM (the answer is read at \"=\")";
  }
  static void run(const PartInputs& p, const Options&) {
    const data::DataSource::Modular m = p.in.data.modular();
    std::size_t width = 0;
    const std::vector<double> embedding = token_embedding(p.in.model, m.p, width);  // sets width: not in the same call
    const std::vector<double> shares = fourier_spectrum(embedding, m.p, width);
    const std::vector<std::size_t> keys = key_frequencies(shares);
    p.result.add({"fourier_embedding", "fourier", "Share of the token embedding's squared norm at each frequency k of Z_p (k and p - k together)",
                  "frequency", "", numbered(shares.size()), {"share"}, shares, false, true, 0});
    std::string list;
    for (std::size_t k : keys) list += (list.empty() ? "" : ", ") + std::to_string(k);
    double key_share = 0;
    for (std::size_t k : keys) key_share += shares[k];
    p.result.facts["fourier.key_frequencies"] = static_cast<double>(keys.size());
    p.result.facts["fourier.key_share"] = key_share;
    p.result.notes.push_back("fourier: key frequencies " + (list.empty() ? std::string("none") : list) + " (more than twice the mean share)");
    if (m.sign == 0) {
      p.result.notes.push_back("fourier: no progress measures: they read a + b or a - b, and this operation is not a sum");
      return;
    }
    progress_measures(p.in.model, p.in.data, p.run.dir, keys, p.result);
  }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(FourierPart);

}  // namespace attnlab
