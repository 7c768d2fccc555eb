#include "framework/models/text_models.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace attnlab {
namespace {

using I = std::int64_t;

void check_ids(const Tensor& ids, const char* who) {
  if (ids.dtype() != DType::int64 || ids.dim() != 2) {
    throw std::invalid_argument(std::string(who) + ": expected token ids as an int64 tensor [B, T], got " +
                                shape_str(ids.shape()) + " " + dtype_name(ids.dtype()));
  }
}

// The stack as a token model of `kind` builds it: its causality and the length of what it reads.
EncoderConfig stack(const ModelConfig& config, bool causal, std::size_t max_len, bool padded) {
  EncoderConfig e = config.encoder;
  e.causal = causal;
  e.max_len = max_len;
  e.padding_mask = padded;
  e.alibi = config.positional == PositionalKind::alibi;
  return e;
}

std::size_t token_sequence_length(const DataShape& shape, bool classes) {
  if (shape.images()) throw OptionError("kind", "this model kind reads token sequences, and the task is made of images; use vit");
  if (shape.vocab_size == 0) throw std::invalid_argument("the data has no vocabulary (vocab_size 0)");
  if (shape.max_len == 0) throw std::invalid_argument("the data's sequences are empty (max_len 0)");
  if (classes && shape.num_classes < 2) {
    throw std::invalid_argument("a classifier needs at least 2 classes; the data has " + std::to_string(shape.num_classes));
  }
  return shape.max_len;
}

}  // namespace

// ---- TokenEncoder ----

TokenEncoder::TokenEncoder(std::size_t vocab_size, PositionalKind positional, const EncoderConfig& config, Generator& gen) {
  if (vocab_size == 0) throw std::invalid_argument("vocab_size must be positive");
  tok = register_module("tok", std::make_shared<Embedding>(vocab_size, config.d_model, gen));
  pos = register_module("pos", std::make_shared<PositionalEncoding>(positional, config.max_len, config.d_model,
                                                                    config.head_dim(), gen));
  encoder = register_module("encoder", std::make_shared<Encoder>(config, gen, positional == PositionalKind::rotary ? pos : nullptr));
}

Tensor TokenEncoder::forward(const Tensor& ids, const Tensor& key_padding_mask, const HookScope& hooks, const Tensor& prefix) {
  Tensor x = tok->forward(ids);  // [B, T, C]
  if (prefix.defined()) x = concat({prefix, x}, 1);
  x = pos->add_to(hooks("hook_embed", x));
  return encoder->forward(x, key_padding_mask, hooks);
}

// ---- CausalLM ----

std::size_t CausalLM::sequence_length(const ModelConfig&, const DataShape& shape) { return token_sequence_length(shape, false); }

CausalLM::CausalLM(const ModelConfig& config, const DataShape& shape, Generator& gen)
    : encoder_config_(stack(config, true, sequence_length(config, shape), shape.padded)) {
  body = register_module("body", std::make_shared<TokenEncoder>(shape.vocab_size, config.positional, encoder_config_, gen));
  head = register_module("head", config.tie_embeddings
                                     ? std::make_shared<Linear>(body->tok->weight, false, gen)
                                     : std::make_shared<Linear>(encoder_config_.d_model, shape.vocab_size, false, gen));
  gpt_init(*this, encoder_config_.n_layers, gen);  // a tied weight is an embedding here: N(0, 0.02), as in nanoGPT
}

Tensor CausalLM::run(const Batch& batch, const HookScope& hooks) {
  check_ids(batch.input, "CausalLM");
  return head->forward(body->forward(batch.input, batch.key_padding_mask, hooks));  // [B, T, V]
}

Tensor CausalLM::logits(const Tensor& ids) { return forward(Batch{ids, Tensor(), Tensor()}).logits; }

Tensor CausalLM::loss(const Tensor& ids, const Tensor& targets) { return cross_entropy(logits(ids), targets); }

std::vector<std::int64_t> CausalLM::generate(const std::vector<std::int64_t>& prompt, std::size_t n_tokens,
                                             double temperature, std::size_t top_k, Generator& gen) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt needs at least one token");
  if (!(temperature >= 0) || !std::isfinite(temperature)) throw std::invalid_argument("generate: temperature must be a finite number >= 0");
  const std::size_t vocab = vocab_size(), max_len = encoder_config_.max_len;
  for (std::int64_t id : prompt)
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
      throw std::invalid_argument("generate: prompt token " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  EvalScope scope(*this);
  std::vector<std::int64_t> tokens = prompt;
  std::vector<double> probs(vocab);
  std::vector<std::size_t> order(vocab);
  for (std::size_t step = 0; step < n_tokens; ++step) {
    const std::size_t context = std::min(tokens.size(), max_len);
    const std::vector<std::int64_t> window(tokens.end() - static_cast<std::ptrdiff_t>(context), tokens.end());
    const Tensor out = logits(from_indices(window, {1, context}));  // [1, T, V]
    const std::vector<double> all = slice(out, 1, static_cast<I>(context) - 1, static_cast<I>(context)).to_vector();
    std::size_t chosen = 0;
    if (temperature == 0.0) {
      chosen = static_cast<std::size_t>(std::max_element(all.begin(), all.end()) - all.begin());
    } else {
      std::iota(order.begin(), order.end(), 0);
      const std::size_t k = top_k == 0 ? vocab : std::min(top_k, vocab);
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [&](std::size_t a, std::size_t b) { return all[a] > all[b]; });
      double total = 0;  // exp((l_i - l_max) / T): no inf - inf however small T is
      for (std::size_t i = 0; i < k; ++i) total += (probs[i] = std::exp((all[order[i]] - all[order[0]]) / temperature));
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

std::size_t SequenceClassifier::sequence_length(const ModelConfig& config, const DataShape& shape) {
  return token_sequence_length(shape, true) + (config.pooling == Pooling::cls ? 1 : 0);  // room for the CLS token
}

SequenceClassifier::SequenceClassifier(const ModelConfig& config, const DataShape& shape, Generator& gen)
    : encoder_config_(stack(config, false, sequence_length(config, shape), shape.padded)), pooling_(config.pooling) {
  body = register_module("body", std::make_shared<TokenEncoder>(shape.vocab_size, config.positional, encoder_config_, gen));
  head = register_module("head", std::make_shared<Linear>(encoder_config_.d_model, shape.num_classes, true, gen));
  if (pooling_ == Pooling::cls) {
    NoGradGuard no_grad;
    cls = register_parameter("cls", randn({1, 1, encoder_config_.d_model}, gen, {}, 0.0, 0.02), ParamKind::embedding);
  }
  gpt_init(*this, encoder_config_.n_layers, gen);  // BERT and GPT-2 alike: N(0, 0.02) for tokens and positions
}

Tensor SequenceClassifier::run(const Batch& batch, const HookScope& hooks) {
  const Tensor& ids = batch.input;
  check_ids(ids, "SequenceClassifier");
  if (pooling_ == Pooling::cls) {
    Tensor mask = batch.key_padding_mask;
    if (mask.defined()) mask = concat({zeros({ids.size(0), 1}, DType::boolean), mask}, 1);  // the CLS token is never padding
    return head->forward(pool(body->forward(ids, mask, hooks, broadcast_to(cls, {ids.size(0), 1, cls.size(2)})), batch));
  }
  return head->forward(pool(body->forward(ids, batch.key_padding_mask, hooks), batch));  // [B, K]
}

Tensor SequenceClassifier::pool(const Tensor& hidden, const Batch& batch) const {
  const I b = static_cast<I>(hidden.size(0)), t = static_cast<I>(hidden.size(1)), c = static_cast<I>(hidden.size(2));
  if (pooling_ == Pooling::cls) return reshape(slice(hidden, 1, 0, 1), {b, c});  // [B, C]
  const Tensor& key_padding_mask = batch.key_padding_mask;
  if (!key_padding_mask.defined()) return mean(hidden, 1);
  // Mean over the real tokens only.
  const Tensor keep = where(key_padding_mask, zeros({}, hidden.dtype()), ones({}, hidden.dtype()));  // [B, T]
  const Tensor count = add(sum(keep, 1, true), 1e-9);                                           // [B, 1]
  return sum(hidden * reshape(keep, {b, t, 1}), 1) / count;
}

std::size_t TokenClassifier::sequence_length(const ModelConfig&, const DataShape& shape) { return token_sequence_length(shape, true); }

TokenClassifier::TokenClassifier(const ModelConfig& config, const DataShape& shape, Generator& gen)
    : encoder_config_(stack(config, false, sequence_length(config, shape), shape.padded)) {
  body = register_module("body", std::make_shared<TokenEncoder>(shape.vocab_size, config.positional, encoder_config_, gen));
  head = register_module("head", std::make_shared<Linear>(encoder_config_.d_model, shape.num_classes, true, gen));
  gpt_init(*this, encoder_config_.n_layers, gen);
}

Tensor TokenClassifier::run(const Batch& batch, const HookScope& hooks) {
  check_ids(batch.input, "TokenClassifier");
  return head->forward(body->forward(batch.input, batch.key_padding_mask, hooks));  // [B, T, K]
}

// ---- registration ----

template <class M>
ModelKindInfo token_model(const char* name, const char* description, TaskFormat format, std::vector<std::string> keys, bool causal) {
  ModelKindInfo k;
  k.name = name;
  k.description = description;
  k.format = format;
  k.keys = std::move(keys);
  k.causal = causal;
  k.sequence_length = &M::sequence_length;
  k.make = [](const ModelConfig& c, const DataShape& s, Generator& g) { return std::shared_ptr<Model>(std::make_shared<M>(c, s, g)); };
  return k;
}

ATTNLAB_REGISTER_MODEL(token_model<CausalLM>("causal_lm", "decoder-only language model (GPT): causal attention, next-token logits",
                                             TaskFormat::causal_lm, {"positional", "tie_embeddings"}, true));
ATTNLAB_REGISTER_MODEL(token_model<TokenClassifier>("token_tagger", "bidirectional encoder with a label per token (BERT-style)",
                                                    TaskFormat::tagging, {"positional"}, false));
ATTNLAB_REGISTER_MODEL(token_model<SequenceClassifier>("sequence_classifier",
                                                       "bidirectional encoder, pooled (mean or CLS) to one label per sequence",
                                                       TaskFormat::classification, {"positional", "pooling"}, false));

}  // namespace attnlab
