// The encoder-decoder Transformer (model kind seq2seq, Vaswani et al. 2017): a bidirectional encoder
// over the source and a decoder over the target that attends causally to itself and across to the
// encoder's output, with the three masking patterns of the original:
//   encoder self-attention    bidirectional, source padding masked
//   decoder self-attention    causal, target padding masked
//   decoder cross-attention   every source position, source padding masked
// Trained with teacher forcing (the decoder reads BOS and the answer, predicting the answer and EOS);
// decoded greedily or by beam search.
//
// model.attention sets the kernel of all three parts; model.encoder_attention, model.decoder_attention
// and model.cross_attention override one each. share_embeddings uses one token embedding for both sides
// (the data must share its vocabulary); tie_embeddings makes the output layer's weight the decoder's
// token embedding.
//
// Named activations: the encoder's under "encoder." (hook_embed, blocks.<i>.*, see models/encoder.hpp),
// the decoder's under "decoder." (hook_embed, blocks.<i>.attn.*, blocks.<i>.cross_attn.*, see
// models/decoder.hpp).
//
// Legend: B batch, S source tokens, T target tokens, C model width, V target vocabulary, K beams.
#pragma once

#include <memory>
#include <vector>

#include "framework/models/decoder.hpp"
#include "framework/models/text_models.hpp"

namespace attnlab {

enum class Seq2SeqPart { encoder, decoder, cross };

// The kernel of one attention part (model.encoder_attention, ...): an empty name means model.attention's
// kernel, empty options its options (or the named kernel's defaults).
struct AttentionChoice {
  std::string name;
  YamlTree options;
};

// seq2seq's own model.* keys.
struct Seq2SeqOptions {
  PositionalKind positional = PositionalKind::learned;
  bool tie_embeddings = false;    // the output layer's weight is the decoder's token embedding
  std::size_t decoder_layers = 0; // 0: as many as the encoder (n_layers)
  bool share_embeddings = false;  // one token embedding for source and target (a shared vocabulary)
  AttentionChoice encoder_attention, decoder_attention, cross_attention;
};

// The stack of one part as the config chooses it: sizes from model.*, its kernel (the part's override or
// model.attention), causal for the decoder, and the length of its keys (max_len).
EncoderConfig seq2seq_part(const Seq2SeqOptions& options, const EncoderConfig& common, const DataShape& shape, Seq2SeqPart part);

// The decoder side: target token embedding (or the encoder's, shared), positions, the decoder stack.
class TokenDecoder : public Module {
 public:
  // `shared_tok` (optional): the encoder's token embedding, used for the target too.
  TokenDecoder(std::size_t vocab_size, PositionalKind positional, const EncoderConfig& self, const EncoderConfig& cross, Generator& gen,
               std::shared_ptr<Embedding> shared_tok = nullptr);
  // ids [B, T] -> [B, T, C].
  Tensor forward(const Tensor& ids, const Tensor& padding_mask, const Tensor& memory, const Tensor& memory_padding_mask,
                 const HookScope& hooks);
  // Decoding: the next n target tokens ids [B, n] of the targets of `state` -> [B, n, C].
  Tensor forward_step(const Tensor& ids, const Tensor& padding_mask, DecoderState& state);

  std::shared_ptr<Embedding> tok;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Decoder> decoder;
};

// One decoded sequence: its tokens (EOS included when it was reached, BOS not) and its log-probability.
struct Decoded {
  std::vector<std::int64_t> tokens;
  double log_prob = 0;
};

class Seq2Seq : public Model {
 public:
  static constexpr const char* kName = "seq2seq";
  static constexpr const char* kDescription = "encoder-decoder Transformer: bidirectional encoder, causal decoder with cross-attention to it";
  static constexpr TaskFormat kFormat = TaskFormat::seq2seq;
  using Options = Seq2SeqOptions;
  static Schema<Options> options_schema();
  // The encoder's stack (the decoder's and cross-attention's: seq2seq_part); OptionError when the data
  // are not pairs of sequences or share_embeddings does not fit them.
  static EncoderConfig stack(const Options& options, const EncoderConfig& common, const DataShape& shape);
  static ModelSize size(const Options& options, const EncoderConfig& stack, const DataShape& shape);
  // Its three attention parts, each with the kernel the config chose for it.
  static std::vector<KernelUse> kernels(const Options& options, const EncoderConfig& common, const DataShape& shape);
  Seq2Seq(const ModelConfig& config, const DataShape& shape, Generator& gen);

  // The encoder's output [B, S, C] for source ids [B, S] and their padding mask (or undefined).
  Tensor encode(const Tensor& source, const Tensor& source_mask, const HookScope& hooks = {});
  // Logits [B, T, V] for decoder inputs [B, T] given the encoder's output.
  Tensor decode(const Tensor& memory, const Tensor& source_mask, const Tensor& decoder_input, const Tensor& decoder_mask,
                const HookScope& hooks = {});

  // Decodes every source of the batch, at most `max_length` tokens each (0: the longest target the
  // model was built for), stopping at EOS. Greedy takes the most likely token at each step; beam search
  // keeps the `beam` best prefixes and returns the finished sequence of the best score, its
  // log-probability divided by length^length_penalty (fairseq's normalisation; 0 ranks by the raw sum).
  // Both run in eval mode under no-grad and restore the mode after. Cached, each step feeds one token per
  // prefix to the decoder's state (beam search reorders it by the prefixes it keeps); recomputed, each
  // step runs the decoder over every prefix. Both give the same outputs (to float rounding).
  std::vector<Decoded> greedy_decode(const Tensor& source, const Tensor& source_mask, std::size_t max_length = 0,
                                     Decoding decoding = Decoding::cached);
  std::vector<Decoded> beam_decode(const Tensor& source, const Tensor& source_mask, std::size_t beam, std::size_t max_length = 0,
                                   double length_penalty = 1.0, Decoding decoding = Decoding::cached);
  // Decoding (inference: no graph, no hooks): the state of empty targets over the encoder's output
  // memory [B, S, C] and its padding, and the logits [B, n, V] of their next n tokens decoder_input [B, n]
  // (the rows decode gives over the whole targets). Run it in eval mode.
  DecoderState start_decoding(const Tensor& memory, const Tensor& source_mask) const {
    return decoder->decoder->start_decoding(memory, source_mask);
  }
  Tensor decode_step(const Tensor& decoder_input, DecoderState& state);

  std::size_t n_layers() const override { return encoder_config_.n_layers; }
  bool feed_forward() const override { return encoder_config_.feed_forward; }
  std::size_t n_heads() const override { return encoder_config_.n_heads; }
  std::size_t tokens_read(const Batch& batch) const override { return batch.input.numel() + batch.decoder_input.numel(); }
  std::vector<AttentionPart> attention_parts() const override;
  std::string readout_blocks() const override { return "decoder.blocks."; }
  const LayerNorm* final_norm() const override { return decoder->decoder->final_norm.get(); }
  std::size_t target_positions() const { return decoder_config_.max_len; }  // the longest output it decodes
  std::int64_t bos() const { return bos_; }
  std::int64_t eos() const { return eos_; }

  std::shared_ptr<TokenEncoder> encoder;
  std::shared_ptr<TokenDecoder> decoder;
  std::shared_ptr<Linear> head;  // C -> V

 protected:
  Tensor run(const Batch& batch, const HookScope& hooks) override;
  const Linear& output_layer() const override { return *head; }

 private:
  // Log-probabilities [N, V] of the next token after each prefix [N, t]: from `state` fed each prefix's
  // last token when there is one (its rows are the prefixes'), else by the decoder over the prefixes.
  std::vector<double> next_log_probs(const Tensor& memory, const Tensor& source_mask, const std::vector<std::vector<std::int64_t>>& prefixes,
                                     DecoderState* state);
  std::size_t limit(std::size_t max_length) const;
  EncoderConfig encoder_config_, decoder_config_;
  std::int64_t bos_, eos_;
  std::size_t vocab_;
};

}  // namespace attnlab
