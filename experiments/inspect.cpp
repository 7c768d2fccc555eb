#include "experiments/inspect.hpp"

#include <cstdio>
#include <stdexcept>

#include "datasets/source.hpp"
#include "experiments/runner/config.hpp"
#include "framework/attention/kernel.hpp"
#include "framework/attention/kernel_check.hpp"
#include "framework/attention/multi_head.hpp"
#include "framework/autograd/gradcheck.hpp"
#include "framework/models/encoder.hpp"
#include "framework/models/model.hpp"
#include "framework/optim/optimizer.hpp"

namespace attnlab {
namespace {

std::string joined(const std::vector<std::string>& items, const std::string& prefix, const char* separator = ", ") {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + prefix + item;
  return out.empty() ? "none" : out;
}

// A component's options, one line each.
void print_options(const std::vector<KeyDoc>& options, const char* indent) {
  if (options.empty()) std::printf("%soptions: none\n", indent);
  for (const KeyDoc& o : options)
    std::printf("%s%-16s %-22s default %-10s %s\n", indent, o.key.c_str(), o.values.c_str(), o.default_text.c_str(), o.doc.c_str());
}

void list_tasks() {
  std::printf("tasks (task.name; their keys sit beside the name):\n");
  for (const std::string& name : data::TaskRegistry::instance().names()) {
    const data::TaskInfo& task = data::TaskRegistry::instance().find(name);
    std::vector<std::string> kinds;
    for (const std::string& kind : ModelRegistry::instance().names()) {
      const TaskFormat f = ModelRegistry::instance().find(kind).format;
      try {
        const auto formats = task.formats(ComponentOptions());
        if (std::find(formats.begin(), formats.end(), f) != formats.end()) kinds.push_back(kind);
      } catch (const std::exception&) {  // the defaults do not suit this task: say nothing of its formats
      }
    }
    std::printf("\n  %s\n    %s\n    trains %s\n", name.c_str(), task.description.c_str(), joined(kinds, "", " or ").c_str());
    print_options(task.options.docs, "    ");
  }
}

void list_models() {
  std::printf("\nmodel kinds (model.kind; every kind reads the stack's keys: d_model, n_heads, n_layers, ff_hidden, feed_forward,\n"
              "norm, activation, dropout, bias, attention, init_from; and its own, beside them):\n");
  for (const std::string& name : ModelRegistry::instance().names()) {
    const ModelKindInfo& kind = ModelRegistry::instance().find(name);
    std::printf("\n  %s\n    %s\n    learns from %s examples\n", name.c_str(), kind.description.c_str(), task_format_name(kind.format));
    print_options(kind.options.docs, "    ");
  }
}

void list_optimizers() {
  std::printf("\noptimizers (train.optimizer.name; their keys sit beside the name):\n");
  for (const std::string& name : OptimizerRegistry::instance().names()) {
    const OptimizerInfo& o = OptimizerRegistry::instance().find(name);
    std::printf("\n  %s\n    %s\n", name.c_str(), o.description.c_str());
    print_options(o.options.docs, "    ");
  }
}

void list_kernels() {
  // The state size is shown for one reference shape: 4 heads of 16 (d_model 64), 64 tokens.
  constexpr std::size_t kHeads = 4, kHeadDim = 16, kTokens = 64;
  std::printf("\nattention kernels (model.attention.name); state: what a layer keeps per sequence to continue it, for %zu heads of %zu "
              "and T = %zu:\n",
              kHeads, kHeadDim, kTokens);
  const auto yes = [](bool b) { return b ? "yes" : "no"; };
  for (const auto& name : KernelRegistry::instance().names()) {
    const KernelInfo& k = KernelRegistry::instance().find(name);
    const KernelCapabilities& c = k.capabilities;
    std::printf("\n  %s\n    %s\n    causal: %s  bidirectional: %s  padding mask: %s  cross-attention: %s  fixed max length: %s  pattern: %s\n"
                "    rows sum to one: %s  alibi: %s  reads the layer input: %s  decodes from its state: %s\n",
                name.c_str(), k.description.c_str(), yes(c.causal), yes(c.bidirectional), yes(c.padding_mask), yes(c.cross_attention),
                yes(c.fixed_max_length), yes(c.pattern), yes(c.normalised_pattern), yes(c.alibi), yes(c.reads_input),
                c.incremental ? "yes" : c.causal ? "no (recomputed over the sequence at each step)" : "no");
    KernelSpec spec{kHeads, kHeadDim, kTokens, c.causal};
    const StateSize state = k.state_size(spec, ComponentOptions());
    std::printf("    state: %.0f numbers (%s%s)\n", state.at(kTokens), state.what.c_str(), state.per_token > 0 ? "; grows with T" : "");
    print_options(k.options, "    ");
  }
}

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
  run("FeedForward", ff, {2, 3, 4}, [&](const Tensor& x) { return ff.forward(x); });
  auto kernel = make_kernel("softmax", KernelSpec{2, 2, 8, true}, ComponentOptions(), gen);
  MultiHeadAttention mha(4, 2, kernel, true, gen);
  run("MultiHeadAttention (causal)", mha, {2, 3, 4}, [&](const Tensor& x) { return mha.self_attention(x, AttentionContext{true, Tensor(), false}); });
  EncoderConfig config;
  config.d_model = 4;
  config.n_heads = 2;
  config.n_layers = 2;
  config.ff_hidden = 6;
  config.max_len = 8;
  Encoder encoder(config, gen);
  run("Encoder (pre-norm)", encoder, {2, 3, 4}, [&](const Tensor& x) { return encoder.forward(x); });
  return results;
}

}  // namespace

int list_registered() {
  list_tasks();
  list_models();
  list_optimizers();
  list_kernels();
  return 0;
}

int list_config_keys() {
  for (const auto& [marker, table] : config_doc_tables()) std::printf("<!-- config-keys: %s -->\n%s\n", marker.c_str(), table.c_str());
  return 0;
}

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
