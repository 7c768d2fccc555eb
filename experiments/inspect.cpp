#include "experiments/inspect.hpp"

#include <cstdio>
#include <stdexcept>

#include "framework/attention/kernel.hpp"
#include "framework/attention/kernel_check.hpp"
#include "framework/attention/multi_head.hpp"
#include "framework/autograd/gradcheck.hpp"
#include "framework/models/encoder.hpp"

namespace attnlab {

int list_kernels() {
  std::printf("tasks (task.name; options in docs/configs.md):\n"
              "  copy, reverse, sort   task.length, task.symbols        token_tagger or causal_lm\n"
              "  mqar                  task.pairs, task.queries, task.symbols, task.sequence_length   causal_lm (token_tagger too with sequence_length)\n"
              "  induction             task.length, task.symbols        causal_lm\n"
              "  majority              task.length, task.symbols        sequence_classifier\n"
              "  char_text             task.path, task.block_size, task.train_fraction   causal_lm\n"
              "  quadrants             task.image_size                  vit\n"
              "  fashion_mnist         task.path (default /usr/share/datasets/fashion-mnist)   vit\n"
              "\nmodels (model.kind): causal_lm, token_tagger, sequence_classifier (model.pooling mean|cls), vit "
              "(model.patch_size);\n  shared: d_model, n_heads, n_layers, ff_hidden, norm pre|post, activation gelu|relu, "
              "dropout, bias,\n  positional none|sinusoidal|learned|rotary, init_from\n\n");
  std::printf("attention kernels (model.attention.name):\n");
  for (const auto& name : KernelRegistry::instance().names()) {
    const KernelInfo& k = KernelRegistry::instance().find(name);
    const KernelCapabilities& c = k.capabilities;
    std::printf("\n  %s\n    %s\n    causal: %s  bidirectional: %s  padding mask: %s  cross-attention: %s  fixed max length: %s\n",
                name.c_str(), k.description.c_str(), c.causal ? "yes" : "no", c.bidirectional ? "yes" : "no",
                c.padding_mask ? "yes" : "no", c.cross_attention ? "yes" : "no", c.fixed_max_length ? "yes" : "no");
    if (k.options.empty()) std::printf("    options: none\n");
    for (const auto& o : k.options)
      std::printf("    %-16s %-22s default %-10s %s\n", o.name.c_str(), o.type.c_str(), o.default_value.c_str(),
                  o.description.c_str());
  }
  return 0;
}

namespace {

// The float64 gradient check of the framework's modules over their inputs and parameters (small sizes).
std::vector<std::pair<std::string, GradcheckResult>> check_modules() {
  std::vector<std::pair<std::string, GradcheckResult>> results;
  auto run = [&](const std::string& name, Module& m, const Shape& input_shape, const std::function<Tensor(const Tensor&)>& f) {
    m.to(DType::float64);
    m.eval();
    Generator gen(3);
    std::vector<Tensor> inputs{randn(input_shape, gen, DType::float64).set_requires_grad(true)};
    for (const auto& p : m.parameters()) inputs.push_back(p);
    results.emplace_back(name, gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, inputs));
  };
  Generator gen(1);
  Linear linear(4, 3, true, gen);
  run("Linear", linear, {2, 4}, [&](const Tensor& x) { return linear.forward(x); });
  LayerNorm norm(5);
  run("LayerNorm", norm, {3, 5}, [&](const Tensor& x) { return norm.forward(x); });
  FeedForward ff(4, 6, Activation::gelu, 0.0, gen);
  run("FeedForward", ff, {2, 3, 4}, [&](Tensor x) { return ff.forward(x); });
  auto kernel = make_kernel("softmax", KernelSpec{2, 2, 8, true}, YAML::Node(), gen);
  MultiHeadAttention mha(4, 2, kernel, true, gen);
  run("MultiHeadAttention (causal)", mha, {2, 3, 4}, [&](const Tensor& x) { return mha.forward(x, Tensor(), AttentionContext{true, Tensor(), false}).output; });
  EncoderConfig config;
  config.d_model = 4;
  config.n_heads = 2;
  config.n_layers = 2;
  config.ff_hidden = 6;
  config.max_len = 8;
  Encoder encoder(config, gen);
  run("Encoder (pre-norm)", encoder, {2, 3, 4}, [&](const Tensor& x) { return encoder.forward(x).hidden; });
  return results;
}

}  // namespace

int gradcheck_kernels(const std::string& name) {
  std::vector<std::string> names;
  if (name == "all") {
    names = KernelRegistry::instance().names();
  } else {
    try {
      KernelRegistry::instance().find(name);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "attnlab gradcheck: %s\n", e.what());
      return 2;
    }
    names.push_back(name);
  }
  std::size_t passed = 0, failed = 0;
  for (const auto& kernel : names) {
    for (const auto& check : check_kernel_gradients(kernel)) {
      std::printf("%s\n", check.describe().c_str());
      ++(check.result.ok ? passed : failed);
    }
  }
  if (name == "all") {
    for (const auto& [module, result] : check_modules()) {
      std::printf("module %s: %s\n%s", module.c_str(), result.ok ? "ok" : "FAILED", result.ok ? "" : result.report().c_str());
      ++(result.ok ? passed : failed);
    }
  }
  std::printf("%zu passed, %zu failed\n", passed, failed);
  return failed ? 1 : 0;
}

}  // namespace attnlab
