// Models over token sequences: the decoder-only causal language model (GPT) and sequence / token
// classifiers on a bidirectional encoder (BERT-style, mean or CLS pooling). They share TokenEncoder:
// token embedding + positional encoding + encoder stack.
//
// Legend: B batch, T tokens, C model width, V vocabulary, K classes.
#pragma once

#include <memory>
#include <vector>

#include "framework/models/encoder.hpp"

namespace attnlab {

// Re-initialises a model as GPT-2 / nanoGPT (and BERT) do; every text model here starts this way: weights N(0, 0.02), projections into the residual stream
// (attention output, second feed-forward layer) N(0, 0.02 / sqrt(2 n_layers)), biases 0, embeddings
// N(0, 0.02), norms 1 and 0. Attention kernels' own parameters keep their kernel's initialisation.
void gpt_init(Module& model, std::size_t n_layers, Generator& gen);

class TokenEncoder : public Module {
 public:
  TokenEncoder(std::size_t vocab_size, PositionalKind positional, const EncoderConfig& config, Generator& gen);
  // ids [B, T] int64 -> hidden [B, T, C] (and per-layer patterns when asked). `prefix` (optional,
  // [B, P, C]) is prepended after the token embedding, before positions (a CLS token).
  EncoderOutput forward(const Tensor& ids, const Tensor& key_padding_mask, bool need_patterns, const Tensor& prefix = Tensor());
  std::size_t vocab_size() const { return tok->weight.size(0); }

  std::shared_ptr<Embedding> tok;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Encoder> encoder;
};

struct CausalLMConfig {
  std::size_t vocab_size = 0;
  PositionalKind positional = PositionalKind::learned;
  EncoderConfig encoder;  // causal is forced on
  bool head_bias = false;
  // The output layer's weight [V, C] is the token embedding's (GPT-2 and nanoGPT): one tensor, listed
  // once in parameters() and state_dict() as body.tok.weight.
  bool tie_embeddings = false;
};

class CausalLM : public Module {
 public:
  CausalLM(const CausalLMConfig& config, Generator& gen);
  Tensor forward(const Tensor& ids);                                  // [B, T] -> logits [B, T, V]
  EncoderOutput forward_with_patterns(const Tensor& ids, Tensor* logits);
  Tensor loss(const Tensor& ids, const Tensor& targets);              // mean cross-entropy
  // Samples `n_tokens` continuations of `prompt` (ids), feeding at most max_len tokens of context.
  // temperature 0 picks the most likely token; top_k 0 samples from the whole vocabulary. Runs in eval
  // mode under no-grad and restores the mode after.
  std::vector<std::int64_t> generate(const std::vector<std::int64_t>& prompt, std::size_t n_tokens, double temperature,
                                     std::size_t top_k, Generator& gen);
  const CausalLMConfig& config() const { return config_; }

  std::shared_ptr<TokenEncoder> body;
  std::shared_ptr<Linear> head;

 private:
  CausalLMConfig config_;
};

enum class Pooling { mean, cls };
Pooling parse_pooling(const std::string& name);  // "mean" | "cls"
const char* pooling_name(Pooling pooling);

struct ClassifierConfig {
  std::size_t vocab_size = 0;
  std::size_t num_classes = 2;
  PositionalKind positional = PositionalKind::learned;
  Pooling pooling = Pooling::mean;  // sequence classifier only
  EncoderConfig encoder;            // causal is forced off
};

// One label per sequence: pooled encoder output -> Linear -> logits [B, K].
class SequenceClassifier : public Module {
 public:
  SequenceClassifier(const ClassifierConfig& config, Generator& gen);
  // key_padding_mask [B, T] (true = padding) or undefined; padded tokens are left out of the pooling.
  Tensor forward(const Tensor& ids, const Tensor& key_padding_mask = Tensor(), EncoderOutput* encoded = nullptr,
                 bool need_patterns = false);

  std::shared_ptr<TokenEncoder> body;
  std::shared_ptr<Linear> head;
  Tensor cls;  // [1, 1, C], CLS pooling only

 private:
  ClassifierConfig config_;
};

// One label per token: encoder output -> Linear -> logits [B, T, K].
class TokenClassifier : public Module {
 public:
  TokenClassifier(const ClassifierConfig& config, Generator& gen);
  Tensor forward(const Tensor& ids, const Tensor& key_padding_mask = Tensor(), EncoderOutput* encoded = nullptr,
                 bool need_patterns = false);

  std::shared_ptr<TokenEncoder> body;
  std::shared_ptr<Linear> head;
};

}  // namespace attnlab
