#include "framework/models/text_models.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace attnlab {
namespace {

using I = std::int64_t;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void fill_normal(Tensor& t, Generator& gen, double stddev) {
  t.set_data(randn(t.shape(), gen, t.dtype(), 0.0, stddev));
  t.set_requires_grad(true);
}

void check_ids(const Tensor& ids, const char* who) {
  if (ids.dtype() != DType::int64 || ids.dim() != 2) {
    throw std::invalid_argument(std::string(who) + ": expected token ids as an int64 tensor [B, T], got " +
                                shape_str(ids.shape()) + " " + dtype_name(ids.dtype()));
  }
}

}  // namespace

void gpt_init(Module& model, std::size_t n_layers, Generator& gen) {
  NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(std::max<std::size_t>(n_layers, 1)));
  for (auto& p : model.named_parameters()) {
    if (p.name.find(".kernel.") != std::string::npos) continue;
    switch (p.kind) {
      case ParamKind::weight:
        fill_normal(p.tensor, gen, ends_with(p.name, "attn.proj.weight") || ends_with(p.name, "ff.fc2.weight") ? residual_std : 0.02);
        break;
      case ParamKind::embedding: fill_normal(p.tensor, gen, 0.02); break;
      case ParamKind::bias: p.tensor.set_data(zeros(p.tensor.shape(), p.tensor.dtype())), p.tensor.set_requires_grad(true); break;
      case ParamKind::norm: break;  // LayerNorm's own 1 and 0
    }
  }
}

// ---- TokenEncoder ----

TokenEncoder::TokenEncoder(std::size_t vocab_size, PositionalKind positional, const EncoderConfig& config, Generator& gen) {
  if (vocab_size == 0) throw std::invalid_argument("vocab_size must be positive");
  tok = register_module("tok", std::make_shared<Embedding>(vocab_size, config.d_model, gen));
  pos = register_module("pos", std::make_shared<PositionalEncoding>(positional, config.max_len, config.d_model,
                                                                    config.head_dim(), gen));
  encoder = register_module("encoder", std::make_shared<Encoder>(config, gen));
}

EncoderOutput TokenEncoder::forward(const Tensor& ids, const Tensor& key_padding_mask, bool need_patterns, const Tensor& prefix) {
  Tensor x = tok->forward(ids);  // [B, T, C]
  if (prefix.defined()) x = concat({prefix, x}, 1);
  x = pos->add_to(x);
  return encoder->forward(x, key_padding_mask, need_patterns, pos->kind() == PositionalKind::rotary ? pos.get() : nullptr);
}

// ---- CausalLM ----

CausalLM::CausalLM(const CausalLMConfig& config, Generator& gen) : config_(config) {
  config_.encoder.causal = true;
  body = register_module("body", std::make_shared<TokenEncoder>(config.vocab_size, config.positional, config_.encoder, gen));
  head = register_module("head", config.tie_embeddings
                                     ? std::make_shared<Linear>(body->tok->weight, config.head_bias, gen)
                                     : std::make_shared<Linear>(config_.encoder.d_model, config.vocab_size, config.head_bias, gen));
  gpt_init(*this, config_.encoder.n_layers, gen);  // a tied weight is an embedding here: N(0, 0.02), as in nanoGPT
}

EncoderOutput CausalLM::forward_with_patterns(const Tensor& ids, Tensor* logits) {
  check_ids(ids, "CausalLM");
  EncoderOutput out = body->forward(ids, Tensor(), true);
  if (logits) *logits = head->forward(out.hidden);
  return out;
}

Tensor CausalLM::forward(const Tensor& ids) {
  check_ids(ids, "CausalLM");
  return head->forward(body->forward(ids, Tensor(), false).hidden);  // [B, T, V]
}

Tensor CausalLM::loss(const Tensor& ids, const Tensor& targets) { return cross_entropy(forward(ids), targets); }

std::vector<std::int64_t> CausalLM::generate(const std::vector<std::int64_t>& prompt, std::size_t n_tokens,
                                             double temperature, std::size_t top_k, Generator& gen) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt needs at least one token");
  if (temperature < 0) throw std::invalid_argument("generate: temperature must be >= 0");
  const std::size_t vocab = config_.vocab_size, max_len = config_.encoder.max_len;
  for (std::int64_t id : prompt)
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
      throw std::invalid_argument("generate: prompt token " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  struct RestoreMode {  // train/eval as it was, also when forward throws
    Module& m;
    bool training;
    ~RestoreMode() { m.train(training); }
  } restore{*this, is_training()};
  eval();
  NoGradGuard no_grad;
  std::vector<std::int64_t> tokens = prompt;
  std::vector<double> probs(vocab);
  std::vector<std::size_t> order(vocab);
  for (std::size_t step = 0; step < n_tokens; ++step) {
    const std::size_t context = std::min(tokens.size(), max_len);
    const std::vector<std::int64_t> window(tokens.end() - static_cast<std::ptrdiff_t>(context), tokens.end());
    const Tensor logits = forward(from_indices(window, {1, context}));  // [1, T, V]
    const std::vector<double> all = slice(logits, 1, static_cast<I>(context) - 1, static_cast<I>(context)).to_vector();
    std::size_t chosen = 0;
    if (temperature == 0.0) {
      chosen = static_cast<std::size_t>(std::max_element(all.begin(), all.end()) - all.begin());
    } else {
      std::iota(order.begin(), order.end(), 0);
      const std::size_t k = top_k == 0 ? vocab : std::min(top_k, vocab);
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [&](std::size_t a, std::size_t b) { return all[a] > all[b]; });
      const double top = all[order[0]] / temperature;
      double total = 0;
      for (std::size_t i = 0; i < k; ++i) total += (probs[i] = std::exp(all[order[i]] / temperature - top));
      double u = gen.next_double() * total;
      chosen = order[k - 1];
      for (std::size_t i = 0; i < k; ++i) {
        if (u < probs[i]) {
          chosen = order[i];
          break;
        }
        u -= probs[i];
      }
    }
    tokens.push_back(static_cast<std::int64_t>(chosen));
  }
  return std::vector<std::int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end());
}

// ---- classifiers ----

Pooling parse_pooling(const std::string& name) {
  if (name == "mean") return Pooling::mean;
  if (name == "cls") return Pooling::cls;
  throw std::invalid_argument("pooling '" + name + "' is not among [mean, cls]");
}

const char* pooling_name(Pooling pooling) { return pooling == Pooling::mean ? "mean" : "cls"; }

SequenceClassifier::SequenceClassifier(const ClassifierConfig& config, Generator& gen) : config_(config) {
  config_.encoder.causal = false;
  if (config.num_classes < 2) throw std::invalid_argument("num_classes must be at least 2");
  if (config.pooling == Pooling::cls) ++config_.encoder.max_len;  // room for the CLS token
  body = register_module("body", std::make_shared<TokenEncoder>(config.vocab_size, config.positional, config_.encoder, gen));
  head = register_module("head", std::make_shared<Linear>(config_.encoder.d_model, config.num_classes, true, gen));
  if (config.pooling == Pooling::cls) {
    NoGradGuard no_grad;
    cls = register_parameter("cls", randn({1, 1, config_.encoder.d_model}, gen, {}, 0.0, 0.02), ParamKind::embedding);
  }
  gpt_init(*this, config_.encoder.n_layers, gen);  // BERT and GPT-2 alike: N(0, 0.02) for tokens and positions
}

Tensor SequenceClassifier::forward(const Tensor& ids, const Tensor& key_padding_mask, EncoderOutput* encoded, bool need_patterns) {
  check_ids(ids, "SequenceClassifier");
  const I b = static_cast<I>(ids.size(0)), t = static_cast<I>(ids.size(1)), c = static_cast<I>(config_.encoder.d_model);
  Tensor pooled;
  if (config_.pooling == Pooling::cls) {
    Tensor mask = key_padding_mask;
    if (mask.defined()) mask = concat({zeros({ids.size(0), 1}, DType::boolean), mask}, 1);  // the CLS token is never padding
    EncoderOutput out = body->forward(ids, mask, need_patterns, broadcast_to(cls, {ids.size(0), 1, cls.size(2)}));
    pooled = reshape(slice(out.hidden, 1, 0, 1), {b, c});  // [B, C]
    if (encoded) *encoded = std::move(out);
  } else {
    EncoderOutput out = body->forward(ids, key_padding_mask, need_patterns);
    if (key_padding_mask.defined()) {
      // Mean over the real tokens only.
      const Tensor keep = where(key_padding_mask, zeros({}, out.hidden.dtype()), ones({}, out.hidden.dtype()));  // [B, T]
      const Tensor weights = reshape(keep, {b, t, 1});
      const Tensor count = add(sum(keep, 1, true), 1e-9);                                                 // [B, 1]
      pooled = sum(out.hidden * weights, 1) / count;
    } else {
      pooled = mean(out.hidden, 1);
    }
    if (encoded) *encoded = std::move(out);
  }
  return head->forward(pooled);  // [B, K]
}

TokenClassifier::TokenClassifier(const ClassifierConfig& config, Generator& gen) {
  if (config.num_classes < 2) throw std::invalid_argument("num_classes must be at least 2");
  EncoderConfig encoder = config.encoder;
  encoder.causal = false;
  body = register_module("body", std::make_shared<TokenEncoder>(config.vocab_size, config.positional, encoder, gen));
  head = register_module("head", std::make_shared<Linear>(encoder.d_model, config.num_classes, true, gen));
  gpt_init(*this, encoder.n_layers, gen);
}

Tensor TokenClassifier::forward(const Tensor& ids, const Tensor& key_padding_mask, EncoderOutput* encoded, bool need_patterns) {
  check_ids(ids, "TokenClassifier");
  EncoderOutput out = body->forward(ids, key_padding_mask, need_patterns);
  Tensor logits = head->forward(out.hidden);  // [B, T, K]
  if (encoded) *encoded = std::move(out);
  return logits;
}

}  // namespace attnlab
