#include "framework/models/seq2seq.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "framework/attention/kernel.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

const AttentionChoice& choice_of(const Seq2SeqOptions& o, Seq2SeqPart part) {
  return part == Seq2SeqPart::encoder ? o.encoder_attention : part == Seq2SeqPart::decoder ? o.decoder_attention : o.cross_attention;
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

// One prefix of beam search.
struct Hypothesis {
  std::vector<std::int64_t> tokens;  // BOS first
  double score = 0;                  // log-probability
  std::size_t row = 0;               // its row in the decoder's state (cached decoding)
};

// One example's next beam from its live hypotheses, whose next-token log-probabilities are rows
// [first, first + live.size()) of lp [N, vocab]: the best 2K continuations in score order, kept while
// they do not end; an end among the best K finishes a sequence (fairseq's rule). A continuation's row is
// its hypothesis's, first + h.
void advance_beam(std::vector<Hypothesis>& live, std::vector<Hypothesis>& finished, const std::vector<double>& lp, std::size_t first,
                  std::size_t vocab, std::size_t beam, std::int64_t eos) {
  std::vector<std::pair<double, std::size_t>> candidates;
  for (std::size_t h = 0; h < live.size(); ++h)
    for (std::size_t v = 0; v < vocab; ++v) candidates.emplace_back(live[h].score + lp[(first + h) * vocab + v], h * vocab + v);
  const std::size_t keep = std::min(candidates.size(), 2 * beam);
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep), candidates.end(),
                    [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
  std::vector<Hypothesis> next;
  for (std::size_t rank = 0; rank < keep && next.size() < beam; ++rank) {
    const auto [score, index] = candidates[rank];
    Hypothesis h{live[index / vocab].tokens, score, first + index / vocab};
    h.tokens.push_back(static_cast<std::int64_t>(index % vocab));
    if (h.tokens.back() != eos) {
      next.push_back(std::move(h));
    } else if (rank < beam) {
      finished.push_back(std::move(h));
    }
  }
  live = finished.size() >= beam ? std::vector<Hypothesis>{} : std::move(next);
}

Schema<AttentionChoice> attention_part_schema() {
  Schema<AttentionChoice> s;
  s.field("name", &AttentionChoice::name, "this part's kernel; empty for model.attention's");
  s.yaml("options", &AttentionChoice::options,
         "this part's kernel options; empty for the named kernel's defaults (for model.attention's options when no name is given)");
  s.rule([](const ConfigNode& node, AttentionChoice& a) {
    if (a.name.empty()) return;
    try {
      KernelRegistry::instance().find(a.name);
    } catch (const std::invalid_argument& e) {
      node.fail("name", e.what());
    }
  });
  return s;
}

}  // namespace

EncoderConfig seq2seq_part(const Seq2SeqOptions& o, const EncoderConfig& common, const DataShape& shape, Seq2SeqPart part) {
  EncoderConfig e = common;
  const AttentionChoice& choice = choice_of(o, part);
  if (!choice.name.empty()) {
    e.attention = choice.name;
    e.attention_options = choice.options;  // the named kernel's own options (empty: its defaults)
  } else if (!choice.options.empty()) {
    e.attention_options = choice.options;
  }
  e.padding_mask = shape.padded;
  e.causal = part == Seq2SeqPart::decoder;
  e.alibi = part != Seq2SeqPart::cross && o.positional == PositionalKind::alibi;
  e.max_len = part == Seq2SeqPart::decoder ? shape.target_max_len : shape.max_len;
  if (part != Seq2SeqPart::encoder && o.decoder_layers) e.n_layers = o.decoder_layers;
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

Tensor TokenDecoder::forward_step(const Tensor& ids, const Tensor& padding_mask, DecoderState& state) {
  return decoder->forward_step(pos->add_to(tok->forward(ids), state.position), padding_mask, state);
}

// ---- Seq2Seq ----

Schema<Seq2SeqOptions> Seq2Seq::options_schema() {
  Schema<Options> s;
  s.choice("positional", &Options::positional, positional_kind_names(),
           "how positions enter, in the encoder and the decoder: added (`sinusoidal`, `learned`), rotated queries and keys "
           "(`rotary`, needs an even head dimension), a per-head distance bias on the self-attention scores (`alibi`) or `none`");
  s.field("tie_embeddings", &Options::tie_embeddings, "the output layer's weight is the decoder's token embedding");
  s.field("decoder_layers", &Options::decoder_layers, "decoder layers; 0 means as many as the encoder's n_layers");
  s.field("share_embeddings", &Options::share_embeddings,
          "one token embedding for source and target (the task must use one vocabulary for both, as the toy tasks do)");
  s.section("encoder_attention", &Options::encoder_attention, attention_part_schema());
  s.section("decoder_attention", &Options::decoder_attention, attention_part_schema());
  s.section("cross_attention", &Options::cross_attention, attention_part_schema());
  return s;
}

EncoderConfig Seq2Seq::stack(const Options& o, const EncoderConfig& common, const DataShape& shape) {
  if (shape.images()) throw OptionError("kind", "seq2seq reads token sequences, and the task is made of images; use vit");
  if (shape.target_max_len == 0 || shape.bos < 0 || shape.eos < 0) {
    throw OptionError("kind", "seq2seq needs a task with a seq2seq format (pairs of source and target sequences)");
  }
  if (o.share_embeddings && !shape.shared_vocabulary) {
    throw OptionError("share_embeddings", "model.share_embeddings needs one vocabulary for source and target, and this task has "
                                          "two (e.g. scan's commands and actions); remove it");
  }
  if (o.positional == PositionalKind::rotary && common.head_dim() % 2 != 0) {
    throw OptionError("positional", "rotary positions need an even head dimension; d_model / n_heads is " + std::to_string(common.head_dim()));
  }
  return seq2seq_part(o, common, shape, Seq2SeqPart::encoder);
}

ModelSize Seq2Seq::size(const Options& o, const EncoderConfig& encoder, const DataShape& shape) {
  const EncoderConfig decoder = seq2seq_part(o, encoder, shape, Seq2SeqPart::decoder);
  ModelSize s = blocks_size(encoder, encoder.n_layers, static_cast<double>(encoder.max_len));
  const double width = static_cast<double>(encoder.d_model), hidden = encoder.feed_forward ? static_cast<double>(encoder.hidden()) : 0.0;
  const double target = static_cast<double>(decoder.max_len), layers = static_cast<double>(decoder.n_layers);
  const double classes = static_cast<double>(shape.num_classes);
  // A decoder block adds cross-attention to an encoder block's parts; the embeddings, positions and head.
  s.parameters += layers * (8 * width * width + 2 * width * hidden + 13 * width + hidden) + static_cast<double>(shape.vocab_size) * width +
                  static_cast<double>(encoder.max_len) * width + classes * width + target * width + width * classes;
  s.activations += target * layers * (20 * width + 3 * hidden) + 2 * target * classes;
  return s;
}

std::vector<KernelUse> Seq2Seq::kernels(const Options& o, const EncoderConfig& common, const DataShape& shape) {
  std::vector<KernelUse> uses;
  for (Seq2SeqPart part : {Seq2SeqPart::encoder, Seq2SeqPart::decoder, Seq2SeqPart::cross}) {
    const EncoderConfig e = seq2seq_part(o, common, shape, part);
    KernelUse use;
    const AttentionChoice& choice = choice_of(o, part);
    const std::string key = key_of(part);
    use.part = key.substr(0, key.find('_'));  // "encoder_attention" -> "encoder"
    use.key = "model." + (choice.name.empty() && choice.options.empty() ? std::string("attention") : key);
    use.name = e.attention;
    use.options = e.attention_options;
    use.spec = e.kernel_spec();
    use.spec.cross = part == Seq2SeqPart::cross;
    use.layers = e.n_layers;
    uses.push_back(use);
  }
  return uses;
}

Seq2Seq::Seq2Seq(const ModelConfig& config, const DataShape& shape, Generator& gen) {
  const Options o = read_options<Seq2Seq>(config.kind.options);
  encoder_config_ = stack(o, config.encoder, shape);
  decoder_config_ = seq2seq_part(o, config.encoder, shape, Seq2SeqPart::decoder);
  bos_ = shape.bos, eos_ = shape.eos, vocab_ = shape.num_classes;
  encoder = register_module("encoder", std::make_shared<TokenEncoder>(shape.vocab_size, o.positional, encoder_config_, gen));
  decoder = register_module("decoder", std::make_shared<TokenDecoder>(shape.num_classes, o.positional, decoder_config_,
                                                                      seq2seq_part(o, config.encoder, shape, Seq2SeqPart::cross), gen,
                                                                      o.share_embeddings ? encoder->tok : nullptr));
  head = register_module("head", o.tie_embeddings ? std::make_shared<Linear>(decoder->tok->weight, false, gen)
                                                  : std::make_shared<Linear>(decoder_config_.d_model, shape.num_classes, false, gen));
  // Residual projections scaled as GPT-2 does, by the number of layers a signal passes (encoder, then decoder).
  gpt_init(*this, encoder_config_.n_layers + decoder_config_.n_layers, gen, encoder_config_.init);
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

Tensor Seq2Seq::decode_step(const Tensor& decoder_input, DecoderState& state) {
  if (decoder_input.dtype() != DType::int64 || decoder_input.dim() != 2) {
    throw std::invalid_argument("Seq2Seq: expected decoder inputs as an int64 tensor [B, n], got " + shape_str(decoder_input.shape()));
  }
  NoGradGuard no_grad;
  return head->forward(decoder->forward_step(decoder_input, Tensor(), state));  // [B, n, V]
}

std::vector<double> Seq2Seq::next_log_probs(const Tensor& memory, const Tensor& source_mask,
                                            const std::vector<std::vector<std::int64_t>>& prefixes, DecoderState* state) {
  const std::size_t n = prefixes.size(), t = prefixes[0].size();
  std::vector<std::int64_t> ids;
  for (const auto& p : prefixes) {
    if (state) {
      ids.push_back(p.back());  // the state has read the rest
    } else {
      ids.insert(ids.end(), p.begin(), p.end());
    }
  }
  const Tensor logits = state ? decode_step(from_indices(ids, {n, 1}), *state)                        // [N, 1, V]
                              : decode(memory, source_mask, from_indices(ids, {n, t}), Tensor());     // [N, t, V]
  const I last = static_cast<I>(logits.size(1));
  std::vector<double> scores = log_softmax(reshape(slice(logits, 1, last - 1, last), {static_cast<I>(n), static_cast<I>(vocab_)})).to_vector();
  check_finite_scores(scores, "decoding");
  return scores;
}

std::vector<Decoded> Seq2Seq::greedy_decode(const Tensor& source, const Tensor& source_mask, std::size_t max_length, Decoding decoding) {
  EvalScope scope(*this);
  const std::size_t steps = limit(max_length), b = source.size(0);
  const Tensor memory = encode(source, source_mask);
  std::optional<DecoderState> state;
  if (decoding == Decoding::cached) state = start_decoding(memory, source_mask);
  std::vector<std::vector<std::int64_t>> prefixes(b, std::vector<std::int64_t>{bos_});
  std::vector<Decoded> out(b);
  std::vector<bool> done(b, false);
  for (std::size_t step = 0; step < steps && std::count(done.begin(), done.end(), false) > 0; ++step) {
    const std::vector<double> lp = next_log_probs(memory, source_mask, prefixes, state ? &*state : nullptr);
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
                                          double length_penalty, Decoding decoding) {
  if (beam == 0) throw std::invalid_argument("beam search: the beam must hold at least one prefix");
  if (!(length_penalty >= 0) || !std::isfinite(length_penalty)) throw std::invalid_argument("beam search: the length penalty must be a finite number >= 0");
  EvalScope scope(*this);
  const std::size_t steps = limit(max_length), b = source.size(0);
  const Tensor memory = encode(source, source_mask);
  std::optional<DecoderState> state;  // cached: a row per live hypothesis, reordered as they are kept
  if (decoding == Decoding::cached) state = start_decoding(memory, source_mask);
  std::vector<std::vector<Hypothesis>> live(b), finished(b);
  for (std::size_t r = 0; r < b; ++r) live[r].push_back(Hypothesis{{bos_}, 0.0, r});
  const auto normalised = [&](const Hypothesis& h) {
    return h.score / std::pow(static_cast<double>(h.tokens.size() - 1), length_penalty);
  };
  for (std::size_t step = 0; step < steps; ++step) {
    std::vector<std::size_t> owner, rows;
    std::vector<std::vector<std::int64_t>> prefixes;
    for (std::size_t r = 0; r < b; ++r)
      for (const Hypothesis& h : live[r]) owner.push_back(r), rows.push_back(h.row), prefixes.push_back(h.tokens);
    if (prefixes.empty()) break;
    if (state) state->select_rows(rows);
    const std::vector<double> lp = state ? next_log_probs(memory, source_mask, prefixes, &*state)
                                         : next_log_probs(rows_of(memory, owner), rows_of(source_mask, owner), prefixes, nullptr);
    std::size_t first = 0;  // the first hypothesis of example r in `prefixes`
    for (std::size_t r = 0; r < b; ++r) {
      const std::size_t count = live[r].size();
      advance_beam(live[r], finished[r], lp, first, vocab_, beam, eos_);
      first += count;
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

ATTNLAB_REGISTER_MODEL(Seq2Seq);

}  // namespace attnlab
