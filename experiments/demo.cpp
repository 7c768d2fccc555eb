// attnlab_demo: the main job until the experiment runner exists. Trains a one-layer, one-head attention
// model to reverse sequences of digits, built from the framework's ops alone, and prints the loss and the
// held-out accuracy as it learns. Deterministic from --seed.
//
// Legend: B batch, T tokens, V vocabulary, C channels.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "framework/ops/blas.hpp"
#include "framework/ops/ops.hpp"

namespace {

using namespace attnlab;

struct Options {
  std::size_t steps = 300, batch = 32, tokens = 16, vocab = 10, channels = 32;
  double lr = 3e-3;
  std::uint64_t seed = 1;
};

// A batch of random digit sequences and their reversals, both [B, T].
std::pair<Tensor, Tensor> reversal_batch(const Options& o, Generator& gen) {
  std::vector<std::int64_t> x(o.batch * o.tokens), y(o.batch * o.tokens);
  for (std::size_t b = 0; b < o.batch; ++b)
    for (std::size_t t = 0; t < o.tokens; ++t) x[b * o.tokens + t] = static_cast<std::int64_t>(gen.next_below(o.vocab));
  for (std::size_t b = 0; b < o.batch; ++b)
    for (std::size_t t = 0; t < o.tokens; ++t) y[b * o.tokens + t] = x[b * o.tokens + (o.tokens - 1 - t)];
  return {from_indices(x, {o.batch, o.tokens}), from_indices(y, {o.batch, o.tokens})};
}

struct Model {
  Tensor token_embedding, position_embedding, wq, wk, wv, wo, norm_w, norm_b, w1, b1, w2, b2, head;

  Model(const Options& o, Generator& gen) {
    const double s = 1.0 / std::sqrt(static_cast<double>(o.channels));
    auto init = [&](Shape shape, double std) { return randn(shape, gen, {}, 0.0, std).set_requires_grad(true); };
    token_embedding = init({o.vocab, o.channels}, 0.5);
    position_embedding = init({o.tokens, o.channels}, 0.5);
    wq = init({o.channels, o.channels}, s);
    wk = init({o.channels, o.channels}, s);
    wv = init({o.channels, o.channels}, s);
    wo = init({o.channels, o.channels}, s);
    norm_w = ones({o.channels}).set_requires_grad(true);
    norm_b = zeros({o.channels}).set_requires_grad(true);
    w1 = init({o.channels, 4 * o.channels}, s);
    b1 = zeros({4 * o.channels}).set_requires_grad(true);
    w2 = init({4 * o.channels, o.channels}, s / 2);
    b2 = zeros({o.channels}).set_requires_grad(true);
    head = init({o.channels, o.vocab}, s);
  }

  std::vector<Tensor*> parameters() {
    return {&token_embedding, &position_embedding, &wq, &wk, &wv, &wo, &norm_w, &norm_b, &w1, &b1, &w2, &b2, &head};
  }

  // ids [B, T] -> logits [B, T, V]
  Tensor forward(const Tensor& ids) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(wq.size(0)));
    Tensor x = embedding(token_embedding, ids) + position_embedding;                      // [B, T, C]
    Tensor q = matmul(x, wq), k = matmul(x, wk), v = matmul(x, wv);                      // [B, T, C]
    Tensor pattern = softmax(matmul(q, k, false, true) * scale);                         // [B, T, T]
    x = x + matmul(matmul(pattern, v), wo);                                              // [B, T, C]
    Tensor h = layer_norm(x, norm_w, norm_b);
    x = x + matmul(gelu(matmul(h, w1) + b1), w2) + b2;                                   // [B, T, C]
    return matmul(x, head);                                                              // [B, T, V]
  }
};

// Adam (Kingma & Ba 2015) on the demo's parameters; framework/optim will replace it.
struct Adam {
  std::vector<std::vector<float>> m, v;
  std::size_t t = 0;
  void step(std::vector<Tensor*> params, double lr) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    if (m.empty())
      for (Tensor* p : params) m.emplace_back(p->numel(), 0.0f), v.emplace_back(p->numel(), 0.0f);
    ++t;
    const double c1 = 1 - std::pow(b1, static_cast<double>(t)), c2 = 1 - std::pow(b2, static_cast<double>(t));
    for (std::size_t i = 0; i < params.size(); ++i) {
      Tensor grad = params[i]->grad();
      if (!grad.defined()) continue;
      float* w = params[i]->data<float>();
      const float* g = grad.data<float>();
      for (std::size_t j = 0; j < params[i]->numel(); ++j) {
        m[i][j] = static_cast<float>(b1 * m[i][j] + (1 - b1) * g[j]);
        v[i][j] = static_cast<float>(b2 * v[i][j] + (1 - b2) * g[j] * g[j]);
        w[j] -= static_cast<float>(lr * (m[i][j] / c1) / (std::sqrt(v[i][j] / c2) + eps));
      }
      params[i]->zero_grad();
    }
  }
};

double token_accuracy(const Tensor& logits, const Tensor& targets) {
  const Tensor predicted = argmax(logits, -1);
  const auto p = predicted.to_vector(), t = targets.to_vector();
  std::size_t correct = 0;
  for (std::size_t i = 0; i < p.size(); ++i) correct += p[i] == t[i];
  return static_cast<double>(correct) / static_cast<double>(p.size());
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--steps N] [--seed S] [--lr LR]\n"
               "Trains a one-layer attention model to reverse digit sequences and prints its loss.\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_blas_core(argv);
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return usage(argv[0]), 0;
    if (i + 1 >= argc) return usage(argv[0]);
    char* end = nullptr;
    const char* value = argv[++i];
    if (arg == "--steps") o.steps = std::strtoull(value, &end, 10);
    else if (arg == "--seed") o.seed = std::strtoull(value, &end, 10);
    else if (arg == "--lr") o.lr = std::strtod(value, &end);
    else return usage(argv[0]);
    if (!end || *end != '\0') {
      std::fprintf(stderr, "%s: %s expects a number, got '%s'\n", argv[0], arg.c_str(), value);
      return 2;
    }
  }

  Generator init_gen(o.seed), data_gen(o.seed + 1), eval_gen(o.seed + 2);
  Model model(o, init_gen);
  Adam adam;
  const auto [eval_x, eval_y] = reversal_batch(Options{o.steps, 512, o.tokens, o.vocab, o.channels, o.lr, o.seed}, eval_gen);
  std::printf("attnlab demo: reverse %zu digits with one attention layer (C=%zu), %zu steps of batch %zu\n", o.tokens,
              o.channels, o.steps, o.batch);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t step = 1; step <= o.steps; ++step) {
    const auto [x, y] = reversal_batch(o, data_gen);
    Tensor loss = cross_entropy(model.forward(x), y);
    loss.backward();
    adam.step(model.parameters(), o.lr);
    if (step == 1 || step % 25 == 0 || step == o.steps) {
      double accuracy;
      {
        NoGradGuard no_grad;
        accuracy = token_accuracy(model.forward(eval_x), eval_y);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("step %4zu  loss %.4f  held-out token accuracy %5.1f%%  (%.1fs)\n", step, loss.item(),
                  100.0 * accuracy, seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}
