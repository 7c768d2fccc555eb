// Models over token sequences: the decoder-only causal language model (GPT) and sequence / token
// classifiers on a bidirectional encoder (BERT-style, mean or CLS pooling). They share TokenEncoder:
// token embedding + positional encoding + encoder stack. Model kinds causal_lm, token_tagger and
// sequence_classifier (framework/models/model.hpp).
//
// Legend: B batch, T tokens, C model width, V vocabulary, K classes.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "framework/models/model.hpp"

namespace attnlab {

class TokenEncoder : public Module {
 public:
  TokenEncoder(std::size_t vocab_size, PositionalKind positional, const EncoderConfig& config, Generator& gen);
  // ids [B, T] int64 -> hidden [B, T, C]. `prefix` (optional, [B, P, C]) is prepended after the token
  // embedding, before positions (a CLS token).
  Tensor forward(const Tensor& ids, const Tensor& key_padding_mask, const HookScope& hooks, const Tensor& prefix = Tensor());
  // Decoding a causal stack: the next n tokens ids [B, n] of the sequences of `state` (from
  // encoder->start_decoding), their padding [B, n] or undefined -> hidden [B, n, C], at positions
  // state.position onwards.
  Tensor forward_step(const Tensor& ids, const Tensor& key_padding_mask, StackState& state);
  std::size_t vocab_size() const { return tok->weight.size(0); }

  std::shared_ptr<Embedding> tok;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Encoder> encoder;
};

// GPT: causal encoder, then a Linear to the vocabulary. shape.vocab_size and shape.max_len size it.
class CausalLM : public Model {
 public:
  static constexpr const char* kName = "causal_lm";
  static constexpr const char* kDescription = "decoder-only language model (GPT): causal attention, next-token logits";
  static constexpr TaskFormat kFormat = TaskFormat::causal_lm;
  static constexpr bool kCausal = true;
  struct Options {
    PositionalKind positional = PositionalKind::learned;
    bool tie_embeddings = false;  // the output layer's weight is the token embedding
  };
  static Schema<Options> options_schema();
  static EncoderConfig stack(const Options& options, const EncoderConfig& common, const DataShape& shape);
  static ModelSize size(const Options& options, const EncoderConfig& stack, const DataShape& shape);
  CausalLM(const ModelConfig& config, const DataShape& shape, Generator& gen);
  Tensor logits(const Tensor& ids);                      // [B, T] -> [B, T, V]
  Tensor loss(const Tensor& ids, const Tensor& targets);  // mean cross-entropy
  // Samples `n_tokens` continuations of `prompt` (ids), feeding at most max_len tokens of context.
  // temperature 0 picks the most likely token; top_k 0 samples from the whole vocabulary. Runs in eval
  // mode under no-grad and restores the mode after. Cached, each token costs what its kernels' states
  // cost while the sequence fits in max_len; beyond it the window slides and is recomputed, as
  // `recomputed` does from the start. Both pick the same tokens (to float rounding of the logits).
  // `on_token`, when given, sees each id as it is picked (a command streams its text with it).
  std::vector<std::int64_t> generate(const std::vector<std::int64_t>& prompt, std::size_t n_tokens, double temperature,
                                     std::size_t top_k, Generator& gen, Decoding decoding = Decoding::cached,
                                     const std::function<void(std::int64_t)>& on_token = {});
  // Decoding (inference: no graph, no hooks): the state of `batch` empty sequences, and the logits
  // [B, n, V] of their next n tokens ids [B, n] (padding [B, n] or undefined): the rows forward gives
  // over the whole sequences. Run it in eval mode.
  StackState start_decoding(std::size_t batch) const { return body->encoder->start_decoding(batch); }
  Tensor logits_step(const Tensor& ids, const Tensor& key_padding_mask, StackState& state);
  std::size_t n_layers() const override { return encoder_config_.n_layers; }
  bool feed_forward() const override { return encoder_config_.feed_forward; }
  std::size_t n_heads() const override { return encoder_config_.n_heads; }
  const LayerNorm* final_norm() const override { return body->encoder->final_norm.get(); }
  bool predicts_next_token() const override { return true; }
  std::size_t vocab_size() const { return body->vocab_size(); }

  std::shared_ptr<TokenEncoder> body;
  // Its weight [V, C] is the token embedding's when tied (GPT-2 and nanoGPT): one tensor, listed once in
  // parameters() and state_dict() as body.tok.weight.
  std::shared_ptr<Linear> head;

 protected:
  Tensor run(const Batch& batch, const HookScope& hooks) override;
  const Linear& output_layer() const override { return *head; }

 private:
  EncoderConfig encoder_config_;
};

// One label per sequence: pooled encoder output -> Linear -> logits [B, K]. Key padding masks leave
// padded tokens out of attention and of the pooling.
class SequenceClassifier : public Model {
 public:
  static constexpr const char* kName = "sequence_classifier";
  static constexpr const char* kDescription = "bidirectional encoder, pooled (mean or CLS) to one label per sequence";
  static constexpr TaskFormat kFormat = TaskFormat::classification;
  struct Options {
    PositionalKind positional = PositionalKind::learned;
    Pooling pooling = Pooling::mean;
  };
  static Schema<Options> options_schema();
  static EncoderConfig stack(const Options& options, const EncoderConfig& common, const DataShape& shape);
  static ModelSize size(const Options& options, const EncoderConfig& stack, const DataShape& shape);
  SequenceClassifier(const ModelConfig& config, const DataShape& shape, Generator& gen);
  std::size_t n_layers() const override { return encoder_config_.n_layers; }
  bool feed_forward() const override { return encoder_config_.feed_forward; }
  std::size_t n_heads() const override { return encoder_config_.n_heads; }
  const LayerNorm* final_norm() const override { return body->encoder->final_norm.get(); }
  std::size_t positions_before_tokens() const override { return pooling_ == Pooling::cls ? 1 : 0; }
  std::string position_label(std::size_t i) const override { return i < positions_before_tokens() ? "cls" : ""; }

  std::shared_ptr<TokenEncoder> body;
  std::shared_ptr<Linear> head;
  Tensor cls;  // [1, 1, C], CLS pooling only

 protected:
  Tensor run(const Batch& batch, const HookScope& hooks) override;
  const Linear& output_layer() const override { return *head; }
  Tensor pool(const Tensor& stream, const Batch& batch) const override;

 private:
  EncoderConfig encoder_config_;
  Pooling pooling_;
};

// One label per token: encoder output -> Linear -> logits [B, T, K].
class TokenClassifier : public Model {
 public:
  static constexpr const char* kName = "token_tagger";
  static constexpr const char* kDescription = "bidirectional encoder with a label per token (BERT-style)";
  static constexpr TaskFormat kFormat = TaskFormat::tagging;
  struct Options {
    PositionalKind positional = PositionalKind::learned;
  };
  static Schema<Options> options_schema();
  static EncoderConfig stack(const Options& options, const EncoderConfig& common, const DataShape& shape);
  static ModelSize size(const Options& options, const EncoderConfig& stack, const DataShape& shape);
  TokenClassifier(const ModelConfig& config, const DataShape& shape, Generator& gen);
  std::size_t n_layers() const override { return encoder_config_.n_layers; }
  bool feed_forward() const override { return encoder_config_.feed_forward; }
  std::size_t n_heads() const override { return encoder_config_.n_heads; }
  const LayerNorm* final_norm() const override { return body->encoder->final_norm.get(); }

  std::shared_ptr<TokenEncoder> body;
  std::shared_ptr<Linear> head;

 protected:
  Tensor run(const Batch& batch, const HookScope& hooks) override;
  const Linear& output_layer() const override { return *head; }

 private:
  EncoderConfig encoder_config_;
};

}  // namespace attnlab
