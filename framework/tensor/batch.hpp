// The vocabulary data and models share (datasets/ and framework/models/ may not include each other):
// one step's tensors, and the shape of the data a model must be built for.
//
// Legend: B batch, T tokens, C image channels, H x W image size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "framework/tensor/enum_names.hpp"
#include "framework/tensor/option_error.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab {

// The layouts of examples a task can produce; each model kind reads one of them.
//   tagging         input = source, target = one label per token (bidirectional encoder)
//   causal_lm       input = source SEP answer[:-1], each position predicting the next token (decoder)
//   classification  input = source, target = one label per sequence
//   images          input = images [B, C, H, W], target = one label per image (ViT)
//   seq2seq         input = source (encoder), decoder_input = BOS answer, target = answer EOS
//                   (encoder-decoder, teacher forcing); sources and answers padded to the batch's longest
enum class TaskFormat { tagging, causal_lm, classification, images, seq2seq };
inline const EnumNames<TaskFormat>& task_format_names() {
  static const EnumNames<TaskFormat> names{{"tagging", TaskFormat::tagging},
                                           {"causal_lm", TaskFormat::causal_lm},
                                           {"classification", TaskFormat::classification},
                                           {"images", TaskFormat::images},
                                           {"seq2seq", TaskFormat::seq2seq}};
  return names;
}
inline const char* task_format_name(TaskFormat format) { return enum_name(task_format_names(), format); }

struct Batch {
  Tensor input;             // [B, T] int64 token ids, or [B, C, H, W] float32 images in [0, 1]
  Tensor target;            // [B, T] int64 (data::kIgnore where not scored), or [B] labels; seq2seq: [B, Tt]
  Tensor key_padding_mask;  // [B, T] bool, true at padding of `input`; undefined when no sequence is padded
  Tensor decoder_input;         // seq2seq: [B, Tt] int64, BOS then the answer (teacher forcing)
  Tensor decoder_padding_mask;  // seq2seq: [B, Tt] bool, true at padding of decoder_input; undefined: none
};

// What a model must be sized for, as the data says.
struct DataShape {
  std::size_t vocab_size = 0;   // token ids are below this (0: the inputs are images); seq2seq: the source's
  std::size_t num_classes = 0;  // labels are below this (classification formats); seq2seq: the target vocabulary
  std::size_t max_len = 0;      // the longest token sequence (seq2seq: source)
  std::size_t channels = 0, height = 0, width = 0;  // image inputs
  bool padded = false;          // batches carry key padding masks
  // seq2seq: the longest decoder input (BOS + answer), the decoder's start and end tokens, and whether
  // source and target share one vocabulary (ids mean the same on both sides: embeddings may be shared).
  std::size_t target_max_len = 0;
  std::int64_t bos = -1, eos = -1;
  bool shared_vocabulary = false;
  bool images() const { return channels > 0; }
};

// Clean and corrupted inputs for activation patching (Meng et al. 2022; TransformerLens's patching):
// each corrupted example differs from its clean one in exactly what the answer depends on (induction:
// the first copy of the segment re-ordered; mqar: one key's value changed; copy, reverse, sort: one
// source token changed; scan: one primitive changed; datasets/toy_tasks.cpp and scan.cpp say each
// exactly), so the answer at the scored position
// changes from `clean_answer` to `corrupted_answer`. Every example of the set has the same layout (the
// same lengths, special tokens and padding at the same positions), so a patch at one position means the
// same thing in each; the scored position may differ per example.
struct PatchingPairs {
  Batch clean, corrupted;                      // the same shapes and masks
  std::vector<std::size_t> position;           // per example: the scored position of the logits (ignored for one label per sequence)
  std::vector<std::int64_t> clean_answer, corrupted_answer;  // per example: the answer with each input
  std::string corruption;                      // what was changed, for reports ("one key's value changed")
  std::size_t size() const { return position.size(); }
};

}  // namespace attnlab
