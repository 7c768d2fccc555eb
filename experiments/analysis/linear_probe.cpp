#include "experiments/analysis/linear_probe.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "framework/autograd/grad_mode.hpp"
#include "framework/ops/ops.hpp"
#include "framework/optim/optimizer.hpp"

namespace attnlab {
namespace {

// The rows of `features` [N, C] at `rows`, standardised with `mean` and `scale` (per column).
Tensor standardised(const std::vector<double>& x, std::size_t width, const std::vector<std::size_t>& rows, const std::vector<double>& mean,
                    const std::vector<double>& scale) {
  std::vector<double> out;
  out.reserve(rows.size() * width);
  for (std::size_t r : rows)
    for (std::size_t c = 0; c < width; ++c) out.push_back((x[r * width + c] - mean[c]) / scale[c]);
  return from_vector(out, {rows.size(), width}, DType::float32);
}

double accuracy(const Tensor& logits, const std::vector<std::int64_t>& labels, const std::vector<std::size_t>& rows) {
  if (rows.empty()) return NAN;
  const std::vector<double> v = logits.to_vector();
  const std::size_t classes = logits.size(1);
  std::size_t right = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto first = v.begin() + static_cast<std::ptrdiff_t>(i * classes);
    right += static_cast<std::int64_t>(std::max_element(first, first + static_cast<std::ptrdiff_t>(classes)) - first) == labels[rows[i]];
  }
  return static_cast<double>(right) / static_cast<double>(rows.size());
}

}  // namespace

LinearProbeResult train_linear_probe(const Tensor& features, const std::vector<std::int64_t>& labels, std::size_t classes,
                                     const std::vector<std::int64_t>& groups, const LinearProbeOptions& options) {
  const std::size_t n = features.dim() == 2 ? features.size(0) : 0, width = n ? features.size(1) : 0;
  if (n == 0 || labels.size() != n || (!groups.empty() && groups.size() != n) || classes < 1) {
    throw std::invalid_argument("train_linear_probe: features [N, C] with N labels (and N groups or none) are needed");
  }
  for (std::int64_t l : labels)
    if (l < 0 || static_cast<std::size_t>(l) >= classes) throw std::invalid_argument("train_linear_probe: a label outside [0, classes)");
  // Whole groups go to one side: a seeded shuffle of the distinct groups, the first held_out_fraction
  // of them held out (at least one on each side).
  std::set<std::int64_t> distinct(groups.begin(), groups.end());
  if (groups.empty())
    for (std::size_t i = 0; i < n; ++i) distinct.insert(static_cast<std::int64_t>(i));
  if (distinct.size() < 2) throw std::invalid_argument("train_linear_probe: at least two groups are needed to hold some out");
  std::vector<std::int64_t> order(distinct.begin(), distinct.end());
  Generator gen(options.seed);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[gen.next_below(i)]);
  const std::size_t held = std::clamp<std::size_t>(static_cast<std::size_t>(std::lround(options.held_out_fraction * static_cast<double>(order.size()))), 1,
                                                    order.size() - 1);
  const std::set<std::int64_t> held_groups(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(held));
  std::vector<std::size_t> train, test;
  for (std::size_t i = 0; i < n; ++i) (held_groups.count(groups.empty() ? static_cast<std::int64_t>(i) : groups[i]) ? test : train).push_back(i);
  const std::vector<double> x = features.to_vector();
  std::vector<double> mean(width, 0.0), scale(width, 0.0);
  for (std::size_t r : train)
    for (std::size_t c = 0; c < width; ++c) mean[c] += x[r * width + c] / static_cast<double>(train.size());
  for (std::size_t r : train)
    for (std::size_t c = 0; c < width; ++c) scale[c] += std::pow(x[r * width + c] - mean[c], 2) / static_cast<double>(train.size());
  for (double& s : scale) s = std::sqrt(s) + 1e-6;
  const Tensor xtrain = standardised(x, width, train, mean, scale), xtest = standardised(x, width, test, mean, scale);
  std::vector<std::int64_t> ytrain;
  for (std::size_t r : train) ytrain.push_back(labels[r]);
  const Tensor target = from_indices(ytrain, {train.size()});
  if (!grad_enabled()) throw std::logic_error("train_linear_probe trains with autograd: call it outside a NoGradGuard");
  Tensor weight = zeros({width, classes}), bias = zeros({classes});
  weight.set_requires_grad(), bias.set_requires_grad();
  AdamWOptions adam;
  adam.lr = options.lr;
  adam.weight_decay = options.weight_decay;
  AdamW optimizer({{"weight", weight, ParamKind::weight}, {"bias", bias, ParamKind::bias}}, adam);
  for (std::size_t step = 0; step < options.steps; ++step) {
    optimizer.zero_grad();
    cross_entropy(matmul(xtrain, weight) + bias, target).backward();
    optimizer.step();
  }
  NoGradGuard no_grad;
  LinearProbeResult r;
  r.classes = classes, r.train_rows = train.size(), r.held_out_rows = test.size();
  r.train_accuracy = accuracy(matmul(xtrain, weight) + bias, labels, train);
  r.held_out_accuracy = accuracy(matmul(xtest, weight) + bias, labels, test);
  std::map<std::int64_t, std::size_t> counts;
  for (std::int64_t y : ytrain) ++counts[y];
  const std::int64_t common = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
  std::size_t hits = 0;
  for (std::size_t t : test) hits += labels[t] == common;
  r.majority_accuracy = test.empty() ? NAN : static_cast<double>(hits) / static_cast<double>(test.size());
  return r;
}

}  // namespace attnlab
