#include "framework/models/seq2seq.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace attnlab {
namespace {

using I = std::int64_t;

const AttentionChoice& choice_of(const ModelConfig& c, Seq2SeqPart part) {
  return part == Seq2SeqPart::encoder ? c.encoder_attention : part == Seq2SeqPart::decoder ? c.decoder_attention : c.cross_attention;
}

const char* key_of(Seq2SeqPart part) {
  return part == Seq2SeqPart::encoder ? "encoder_attention" : part == Seq2SeqPart::decoder ? "decoder_attention" : "cross_attention";
}

// Rows `rows` of a [B, ...] tensor (float memory or a bool mask), in that order.
Tensor rows_of(const Tensor& t, const std::vector<std::size_t>& rows) {
  if (!t.defined()) return t;
  if (t.dtype() == DType::boolean) {
    const std::size_t width = t.numel() / t.size(0);
    std::vector<bool> out;
    const bool* p = t.data<bool>();
    for (std::size_t r : rows)
      for (std::size_t i = 0; i < width; ++i) out.push_back(p[r * width + i]);
    Shape shape = t.shape();
    shape[0] = rows.size();
    return from_mask(out, shape);
  }
  std::vector<std::int64_t> index(rows.begin(), rows.end());
  return index_select(t, 0, from_indices(index, {rows.size()}));
}

std::vector<KernelUse> seq2seq_kernels(const ModelConfig& c, const DataShape& shape) {
  std::vector<KernelUse> uses;
  for (Seq2SeqPart part : {Seq2SeqPart::encoder, Seq2SeqPart::decoder, Seq2SeqPart::cross}) {
    const EncoderConfig e = seq2seq_part(c, shape, part);
    KernelUse use;
    const AttentionChoice& choice = choice_of(c, part);
    use.key = "model." + std::string(choice.name.empty() && choice.options.empty() ? "attention" : key_of(part));
    use.name = e.attention;
    use.options = e.attention_options;
    use.spec = e.kernel_spec();
    use.spec.cross = part == Seq2SeqPart::cross;
    use.layers = e.n_layers;
    uses.push_back(use);
  }
  return uses;
}

}  // namespace

EncoderConfig seq2seq_part(const ModelConfig& c, const DataShape& shape, Seq2SeqPart part) {
  EncoderConfig e = c.encoder;
  const AttentionChoice& choice = choice_of(c, part);
  if (!choice.name.empty()) {
    e.attention = choice.name;
    e.attention_options = choice.options;  // the named kernel's own options (empty: its defaults)
  } else if (!choice.options.empty()) {
    e.attention_options = choice.options;
  }
  e.padding_mask = shape.padded;
  e.causal = part == Seq2SeqPart::decoder;
  e.alibi = part != Seq2SeqPart::cross && c.positional == PositionalKind::alibi;
  e.max_len = part == Seq2SeqPart::decoder ? shape.target_max_len : shape.max_len;
  if (part != Seq2SeqPart::encoder && c.decoder_layers) e.n_layers = c.decoder_layers;
  return e;
}

// ---- TokenDecoder ----

TokenDecoder::TokenDecoder(std::size_t vocab_size, PositionalKind positional, const EncoderConfig& self, const EncoderConfig& cross,
                           Generator& gen, std::shared_ptr<Embedding> shared_tok) {
  tok = register_module("tok", shared_tok ? std::move(shared_tok) : std::make_shared<Embedding>(vocab_size, self.d_model, gen));
  pos = register_module("pos", std::make_shared<PositionalEncoding>(positional, self.max_len, self.d_model, self.head_dim(), gen));
  decoder = register_module("decoder", std::make_shared<Decoder>(self, cross, gen, positional == PositionalKind::rotary ? pos : nullptr));
}

Tensor TokenDecoder::forward(const Tensor& ids, const Tensor& padding_mask, const Tensor& memory, const Tensor& memory_padding_mask,
                             const HookScope& hooks) {
  const Tensor x = pos->add_to(hooks("hook_embed", tok->forward(ids)));
  return decoder->forward(x, padding_mask, memory, memory_padding_mask, hooks);
}

// ---- Seq2Seq ----

std::size_t Seq2Seq::sequence_length(const ModelConfig& config, const DataShape& shape) {
  if (shape.images()) throw OptionError("kind", "seq2seq reads token sequences, and the task is made of images; use vit");
  if (shape.target_max_len == 0 || shape.bos < 0 || shape.eos < 0) {
    throw OptionError("kind", "seq2seq needs a task with a seq2seq format (pairs of source and target sequences)");
  }
  if (config.share_embeddings && !shape.shared_vocabulary) {
    throw OptionError("share_embeddings", "model.share_embeddings needs one vocabulary for source and target, and this task has "
                                          "two (e.g. scan's commands and actions); remove it");
  }
  return shape.max_len;
}

Seq2Seq::Seq2Seq(const ModelConfig& config, const DataShape& shape, Generator& gen)
    : encoder_config_(seq2seq_part(config, shape, Seq2SeqPart::encoder)),
      decoder_config_(seq2seq_part(config, shape, Seq2SeqPart::decoder)),
      bos_(shape.bos),
      eos_(shape.eos),
      vocab_(shape.num_classes) {
  sequence_length(config, shape);
  encoder = register_module("encoder", std::make_shared<TokenEncoder>(shape.vocab_size, config.positional, encoder_config_, gen));
  decoder = register_module("decoder", std::make_shared<TokenDecoder>(shape.num_classes, config.positional, decoder_config_,
                                                                      seq2seq_part(config, shape, Seq2SeqPart::cross), gen,
                                                                      config.share_embeddings ? encoder->tok : nullptr));
  head = register_module("head", config.tie_embeddings ? std::make_shared<Linear>(decoder->tok->weight, false, gen)
                                                       : std::make_shared<Linear>(decoder_config_.d_model, shape.num_classes, false, gen));
  // Residual projections scaled as GPT-2 does, by the number of layers a signal passes (encoder, then decoder).
  gpt_init(*this, encoder_config_.n_layers + decoder_config_.n_layers, gen);
}

Tensor Seq2Seq::encode(const Tensor& source, const Tensor& source_mask, const HookScope& hooks) {
  if (source.dtype() != DType::int64 || source.dim() != 2) {
    throw std::invalid_argument("Seq2Seq: expected source token ids as an int64 tensor [B, S], got " + shape_str(source.shape()));
  }
  return encoder->forward(source, source_mask, hooks);
}

Tensor Seq2Seq::decode(const Tensor& memory, const Tensor& source_mask, const Tensor& decoder_input, const Tensor& decoder_mask,
                       const HookScope& hooks) {
  if (decoder_input.dtype() != DType::int64 || decoder_input.dim() != 2 || decoder_input.size(0) != memory.size(0)) {
    throw std::invalid_argument("Seq2Seq: expected decoder inputs as an int64 tensor [" + std::to_string(memory.size(0)) + ", T], got " +
                                shape_str(decoder_input.shape()));
  }
  return head->forward(decoder->forward(decoder_input, decoder_mask, memory, source_mask, hooks));
}

Tensor Seq2Seq::run(const Batch& batch, const HookScope& hooks) {
  if (!batch.decoder_input.defined()) {
    throw std::invalid_argument("Seq2Seq: the batch has no decoder inputs; a seq2seq model reads a task's seq2seq format");
  }
  const Tensor memory = encode(batch.input, batch.key_padding_mask, hooks.active() ? hooks.child("encoder") : HookScope());
  return decode(memory, batch.key_padding_mask, batch.decoder_input, batch.decoder_padding_mask,
                hooks.active() ? hooks.child("decoder") : HookScope());
}

std::vector<Model::AttentionPart> Seq2Seq::attention_parts() const {
  const bool ff = feed_forward();
  AttentionPart enc{"encoder", {}, false, false, ff}, dec{"decoder", {}, true, true, ff}, cross{"cross", {}, true, false, ff};
  for (std::size_t l = 0; l < encoder_config_.n_layers; ++l) enc.pattern_hooks.push_back("encoder.blocks." + std::to_string(l) + ".attn.hook_pattern");
  for (std::size_t l = 0; l < decoder_config_.n_layers; ++l) {
    dec.pattern_hooks.push_back("decoder.blocks." + std::to_string(l) + ".attn.hook_pattern");
    cross.pattern_hooks.push_back("decoder.blocks." + std::to_string(l) + ".cross_attn.hook_pattern");
  }
  return {enc, dec, cross};
}

std::size_t Seq2Seq::limit(std::size_t max_length) const {
  if (max_length > decoder_config_.max_len) {
    throw std::invalid_argument("decoding: a limit of " + std::to_string(max_length) + " tokens exceeds the " +
                                std::to_string(decoder_config_.max_len) + " target positions the model was built for (0: all of them)");
  }
  return max_length ? max_length : decoder_config_.max_len;
}

std::vector<double> Seq2Seq::next_log_probs(const Tensor& memory, const Tensor& source_mask,
                                            const std::vector<std::vector<std::int64_t>>& prefixes) {
  const std::size_t n = prefixes.size(), t = prefixes[0].size();
  std::vector<std::int64_t> ids;
  for (const auto& p : prefixes) ids.insert(ids.end(), p.begin(), p.end());
  const Tensor logits = decode(memory, source_mask, from_indices(ids, {n, t}), Tensor());      // [N, t, V]
  return log_softmax(reshape(slice(logits, 1, static_cast<I>(t) - 1, static_cast<I>(t)), {static_cast<I>(n), static_cast<I>(vocab_)}))
      .to_vector();
}

std::vector<Decoded> Seq2Seq::greedy_decode(const Tensor& source, const Tensor& source_mask, std::size_t max_length) {
  EvalScope scope(*this);
  const std::size_t steps = limit(max_length), b = source.size(0);
  const Tensor memory = encode(source, source_mask);
  std::vector<std::vector<std::int64_t>> prefixes(b, std::vector<std::int64_t>{bos_});
  std::vector<Decoded> out(b);
  std::vector<bool> done(b, false);
  for (std::size_t step = 0; step < steps && std::count(done.begin(), done.end(), false) > 0; ++step) {
    const std::vector<double> lp = next_log_probs(memory, source_mask, prefixes);
    for (std::size_t r = 0; r < b; ++r) {
      const auto row = lp.begin() + static_cast<std::ptrdiff_t>(r * vocab_);
      const auto best = std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab_));  // first maximum on ties
      const std::int64_t token = best - row;
      prefixes[r].push_back(done[r] ? eos_ : token);  // a finished row's later tokens are never read back
      if (done[r]) continue;
      out[r].tokens.push_back(token);
      out[r].log_prob += *best;
      done[r] = token == eos_;
    }
  }
  return out;
}

std::vector<Decoded> Seq2Seq::beam_decode(const Tensor& source, const Tensor& source_mask, std::size_t beam, std::size_t max_length,
                                          double length_penalty) {
  if (beam == 0) throw std::invalid_argument("beam search: the beam must hold at least one prefix");
  if (!(length_penalty >= 0) || !std::isfinite(length_penalty)) throw std::invalid_argument("beam search: the length penalty must be a finite number >= 0");
  EvalScope scope(*this);
  const std::size_t steps = limit(max_length), b = source.size(0);
  const Tensor memory = encode(source, source_mask);
  struct Hypothesis {
    std::vector<std::int64_t> tokens;  // BOS first
    double score = 0;                  // log-probability
  };
  std::vector<std::vector<Hypothesis>> live(b, {Hypothesis{{bos_}, 0.0}}), finished(b);
  const auto normalised = [&](const Hypothesis& h) {
    return h.score / std::pow(static_cast<double>(h.tokens.size() - 1), length_penalty);
  };
  for (std::size_t step = 0; step < steps; ++step) {
    std::vector<std::size_t> owner;
    std::vector<std::vector<std::int64_t>> prefixes;
    for (std::size_t r = 0; r < b; ++r)
      for (const Hypothesis& h : live[r]) owner.push_back(r), prefixes.push_back(h.tokens);
    if (prefixes.empty()) break;
    const std::vector<double> lp = next_log_probs(rows_of(memory, owner), rows_of(source_mask, owner), prefixes);
    std::size_t first = 0;  // the first hypothesis of example r in `prefixes`
    for (std::size_t r = 0; r < b; ++r) {
      const std::size_t count = live[r].size();
      // Every (hypothesis, token) continuation; the best 2K of them in score order.
      std::vector<std::pair<double, std::size_t>> candidates;
      for (std::size_t h = 0; h < count; ++h)
        for (std::size_t v = 0; v < vocab_; ++v) candidates.emplace_back(live[r][h].score + lp[(first + h) * vocab_ + v], h * vocab_ + v);
      const std::size_t keep = std::min(candidates.size(), 2 * beam);
      std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep), candidates.end(),
                        [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
      std::vector<Hypothesis> next;
      for (std::size_t rank = 0; rank < keep && next.size() < beam; ++rank) {
        const auto [score, index] = candidates[rank];
        Hypothesis h{live[r][index / vocab_].tokens, score};
        h.tokens.push_back(static_cast<std::int64_t>(index % vocab_));
        if (h.tokens.back() != eos_) {
          next.push_back(std::move(h));
        } else if (rank < beam) {  // an end among the best K finishes a sequence (fairseq's rule)
          finished[r].push_back(std::move(h));
        }
      }
      first += count;
      live[r] = finished[r].size() >= beam ? std::vector<Hypothesis>{} : std::move(next);
    }
  }
  std::vector<Decoded> out(b);
  for (std::size_t r = 0; r < b; ++r) {
    std::vector<Hypothesis>& pool = finished[r].empty() ? live[r] : finished[r];  // none finished: the best unfinished
    const auto best = std::max_element(pool.begin(), pool.end(), [&](const Hypothesis& x, const Hypothesis& y) { return normalised(x) < normalised(y); });
    out[r].tokens.assign(best->tokens.begin() + 1, best->tokens.end());
    out[r].log_prob = best->score;
  }
  return out;
}

// ---- registration ----

ATTNLAB_REGISTER_MODEL((ModelKindInfo{
    "seq2seq", "encoder-decoder Transformer: bidirectional encoder, causal decoder with cross-attention to it", TaskFormat::seq2seq,
    {"positional", "tie_embeddings", "decoder_layers", "share_embeddings", "encoder_attention.name", "encoder_attention.options",
     "decoder_attention.name", "decoder_attention.options", "cross_attention.name", "cross_attention.options"},
    false, &Seq2Seq::sequence_length,
    [](const ModelConfig& c, const DataShape& s, Generator& g) { return std::shared_ptr<Model>(std::make_shared<Seq2Seq>(c, s, g)); },
    seq2seq_kernels}));

}  // namespace attnlab
