#include "framework/models/text_models.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
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

// The stack as a token model builds it: its causality, the length of what it reads, its padding and
// whether ALiBi biases its scores; rotary positions need an even head dimension.
EncoderConfig token_stack(const EncoderConfig& common, PositionalKind positional, bool causal, std::size_t max_len, bool padded) {
  if (positional == PositionalKind::rotary && common.head_dim() % 2 != 0) {
    throw OptionError("positional", "rotary positions need an even head dimension; d_model / n_heads is " + std::to_string(common.head_dim()));
  }
  EncoderConfig e = common;
  e.causal = causal;
  e.max_len = max_len;
  e.padding_mask = padded;
  e.alibi = positional == PositionalKind::alibi;
  return e;
}

// The key every token model reads: how positions enter.
template <class O>
void positional_field(Schema<O>& s) {
  s.choice("positional", &O::positional, positional_kind_names(),
           "how positions enter: added (`sinusoidal`, `learned`), rotated queries and keys (`rotary`, needs an even head "
           "dimension), a per-head distance bias on the scores (`alibi`, Press et al. 2022; kernels that declare it) or `none`");
}

// A token model's own numbers: its token embedding, learned positions (when it has them), output layer
// (its logits kept twice per token for the loss).
ModelSize token_size(const EncoderConfig& e, const DataShape& shape, std::size_t outputs, std::size_t output_rows) {
  ModelSize s = blocks_size(e, e.n_layers, static_cast<double>(e.max_len));
  const double width = static_cast<double>(e.d_model);
  s.parameters += static_cast<double>(shape.vocab_size) * width + static_cast<double>(e.max_len) * width + width * static_cast<double>(outputs);
  s.activations += 2.0 * static_cast<double>(output_rows) * static_cast<double>(outputs);
  return s;
}

// The token sampled from one position's logits: the most likely at temperature 0, else drawn from
// softmax(logits / temperature) over the top_k most likely (0: all).
std::size_t pick_token(const std::vector<double>& logits, double temperature, std::size_t top_k, Generator& gen) {
  check_finite_scores(logits, "generate");
  if (temperature == 0.0) return static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const std::size_t vocab = logits.size(), k = top_k == 0 ? vocab : std::min(top_k, vocab);
  std::vector<std::size_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
  std::vector<double> probs(k);
  double total = 0;  // exp((l_i - l_max) / T): no inf - inf however small T is
  for (std::size_t i = 0; i < k; ++i) total += (probs[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature));
  double u = gen.next_double() * total;
  for (std::size_t i = 0; i < k; ++i) {
    if (u < probs[i]) return order[i];
    u -= probs[i];
  }
  return order[k - 1];
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

Tensor TokenEncoder::forward_step(const Tensor& ids, const Tensor& key_padding_mask, StackState& state) {
  return encoder->forward_step(pos->add_to(tok->forward(ids), state.position), key_padding_mask, state);
}

// ---- CausalLM ----

Schema<CausalLM::Options> CausalLM::options_schema() {
  Schema<Options> s;
  positional_field(s);
  s.field("tie_embeddings", &Options::tie_embeddings,
          "the output layer's weight is the token embedding (GPT-2 and nanoGPT tie them); saved once, as `body.tok.weight`");
  return s;
}

EncoderConfig CausalLM::stack(const Options& o, const EncoderConfig& common, const DataShape& shape) {
  return token_stack(common, o.positional, true, token_sequence_length(shape, false), shape.padded);
}

ModelSize CausalLM::size(const Options&, const EncoderConfig& stack, const DataShape& shape) {
  return token_size(stack, shape, shape.vocab_size, stack.max_len);
}

CausalLM::CausalLM(const ModelConfig& config, const DataShape& shape, Generator& gen) {
  const Options o = read_options<CausalLM>(config.kind.options);
  encoder_config_ = stack(o, config.encoder, shape);
  body = register_module("body", std::make_shared<TokenEncoder>(shape.vocab_size, o.positional, encoder_config_, gen));
  head = register_module("head", o.tie_embeddings
                                     ? std::make_shared<Linear>(body->tok->weight, false, gen)
                                     : std::make_shared<Linear>(encoder_config_.d_model, shape.vocab_size, false, gen));
  gpt_init(*this, encoder_config_.n_layers, gen, encoder_config_.init);  // a tied weight is an embedding here: N(0, 0.02), as in nanoGPT
}

Tensor CausalLM::run(const Batch& batch, const HookScope& hooks) {
  check_ids(batch.input, "CausalLM");
  return head->forward(body->forward(batch.input, batch.key_padding_mask, hooks));  // [B, T, V]
}

Tensor CausalLM::logits(const Tensor& ids) { return forward(Batch{ids, Tensor(), Tensor()}).logits; }

Tensor CausalLM::loss(const Tensor& ids, const Tensor& targets) { return cross_entropy(logits(ids), targets); }

Tensor CausalLM::logits_step(const Tensor& ids, const Tensor& key_padding_mask, StackState& state) {
  check_ids(ids, "CausalLM");
  NoGradGuard no_grad;
  return head->forward(body->forward_step(ids, key_padding_mask, state));  // [B, n, V]
}

std::vector<std::int64_t> CausalLM::generate(const std::vector<std::int64_t>& prompt, std::size_t n_tokens,
                                             double temperature, std::size_t top_k, Generator& gen, Decoding decoding,
                                             const std::function<void(std::int64_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt needs at least one token");
  if (!(temperature >= 0) || !std::isfinite(temperature)) throw std::invalid_argument("generate: temperature must be a finite number >= 0");
  const std::size_t vocab = vocab_size(), max_len = encoder_config_.max_len;
  for (std::int64_t id : prompt)
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
      throw std::invalid_argument("generate: prompt token " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  EvalScope scope(*this);
  std::vector<std::int64_t> tokens = prompt;
  std::optional<StackState> state;
  if (decoding == Decoding::cached) state = start_decoding(1);
  for (std::size_t step = 0; step < n_tokens; ++step) {
    Tensor out;  // [1, n, V]: the logits of the tokens fed
    if (state && tokens.size() <= max_len) {
      // The tokens the state has not seen yet: the prompt first, then the last token picked.
      const std::vector<std::int64_t> fresh(tokens.begin() + static_cast<std::ptrdiff_t>(state->position), tokens.end());
      out = logits_step(from_indices(fresh, {1, fresh.size()}), Tensor(), *state);
    } else {
      // Past max_len the window slides: every position moves, so it is recomputed.
      state.reset();
      const std::size_t context = std::min(tokens.size(), max_len);
      out = logits(from_indices(std::vector<std::int64_t>(tokens.end() - static_cast<std::ptrdiff_t>(context), tokens.end()), {1, context}));
    }
    const I last = static_cast<I>(out.size(1));
    tokens.push_back(static_cast<std::int64_t>(pick_token(slice(out, 1, last - 1, last).to_vector(), temperature, top_k, gen)));
    if (on_token) on_token(tokens.back());
  }
  return std::vector<std::int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end());
}

// ---- classifiers ----

Schema<SequenceClassifier::Options> SequenceClassifier::options_schema() {
  Schema<Options> s;
  positional_field(s);
  s.choice("pooling", &Options::pooling, pooling_names(),
           "the head reads the `mean` over the real tokens or a learned `cls` token prepended to the sequence");
  return s;
}

EncoderConfig SequenceClassifier::stack(const Options& o, const EncoderConfig& common, const DataShape& shape) {
  const std::size_t room = o.pooling == Pooling::cls ? 1 : 0;  // for the CLS token
  return token_stack(common, o.positional, false, token_sequence_length(shape, true) + room, shape.padded);
}

ModelSize SequenceClassifier::size(const Options&, const EncoderConfig& stack, const DataShape& shape) {
  return token_size(stack, shape, shape.num_classes, stack.max_len);
}

SequenceClassifier::SequenceClassifier(const ModelConfig& config, const DataShape& shape, Generator& gen) {
  const Options o = read_options<SequenceClassifier>(config.kind.options);
  encoder_config_ = stack(o, config.encoder, shape);
  pooling_ = o.pooling;
  body = register_module("body", std::make_shared<TokenEncoder>(shape.vocab_size, o.positional, encoder_config_, gen));
  head = register_module("head", std::make_shared<Linear>(encoder_config_.d_model, shape.num_classes, true, gen));
  if (pooling_ == Pooling::cls) {
    NoGradGuard no_grad;
    cls = register_parameter("cls", randn({1, 1, encoder_config_.d_model}, gen, {}, 0.0, 0.02), ParamKind::embedding);
  }
  gpt_init(*this, encoder_config_.n_layers, gen, encoder_config_.init);  // BERT and GPT-2 alike: N(0, 0.02) for tokens and positions
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

Schema<TokenClassifier::Options> TokenClassifier::options_schema() {
  Schema<Options> s;
  positional_field(s);
  return s;
}

EncoderConfig TokenClassifier::stack(const Options& o, const EncoderConfig& common, const DataShape& shape) {
  return token_stack(common, o.positional, false, token_sequence_length(shape, true), shape.padded);
}

ModelSize TokenClassifier::size(const Options&, const EncoderConfig& stack, const DataShape& shape) {
  return token_size(stack, shape, shape.num_classes, stack.max_len);
}

TokenClassifier::TokenClassifier(const ModelConfig& config, const DataShape& shape, Generator& gen) {
  const Options o = read_options<TokenClassifier>(config.kind.options);
  encoder_config_ = stack(o, config.encoder, shape);
  body = register_module("body", std::make_shared<TokenEncoder>(shape.vocab_size, o.positional, encoder_config_, gen));
  head = register_module("head", std::make_shared<Linear>(encoder_config_.d_model, shape.num_classes, true, gen));
  gpt_init(*this, encoder_config_.n_layers, gen, encoder_config_.init);
}

Tensor TokenClassifier::run(const Batch& batch, const HookScope& hooks) {
  check_ids(batch.input, "TokenClassifier");
  return head->forward(body->forward(batch.input, batch.key_padding_mask, hooks));  // [B, T, K]
}

ATTNLAB_REGISTER_MODEL(CausalLM);
ATTNLAB_REGISTER_MODEL(TokenClassifier);
ATTNLAB_REGISTER_MODEL(SequenceClassifier);

}  // namespace attnlab
