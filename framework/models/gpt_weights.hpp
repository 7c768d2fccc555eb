// A causal language model's weights under nanoGPT's names (GPT-2's, as nanoGPT's model.py has them), both
// ways, so that a model trained with nanoGPT can be analysed here and one trained here run there.
//
//   attnlab                                  nanoGPT
//   body.tok.weight         [V, C]           transformer.wte.weight
//   body.pos.table          [T, C]           transformer.wpe.weight          (nanoGPT's block_size rows; T <= it)
//   body.encoder.blocks.L.norm1.{weight,bias}         transformer.h.L.ln_1.{weight,bias}
//   body.encoder.blocks.L.attn.qkv.{weight,bias}      transformer.h.L.attn.c_attn.{weight,bias}   [3C, C]
//   body.encoder.blocks.L.attn.proj.{weight,bias}     transformer.h.L.attn.c_proj.{weight,bias}
//   body.encoder.blocks.L.norm2.{weight,bias}         transformer.h.L.ln_2.{weight,bias}
//   body.encoder.blocks.L.ff.fc1.{weight,bias}        transformer.h.L.mlp.c_fc.{weight,bias}       [4C, C]
//   body.encoder.blocks.L.ff.fc2.{weight,bias}        transformer.h.L.mlp.c_proj.{weight,bias}     [C, 4C]
//   body.encoder.final_norm.{weight,bias}             transformer.ln_f.{weight,bias}
//   head.weight             [V, C]           lm_head.weight                  (tied: the same tensor as wte)
//
// The layouts are the same: a Linear's weight is [out, in] in both; the fused projection's rows are the
// queries, then the keys, then the values, each C rows holding the heads in order (nanoGPT's
// `c_attn(x).split(n_embd, dim=2)` then `.view(B, T, n_head, C // n_head)`). Biases are absent on both
// sides with model.bias false (nanoGPT's bias=False); the model must be pre-norm with learned positions
// and GELU (nanoGPT's only architecture).
#pragma once

#include <map>
#include <string>

#include "framework/models/model.hpp"

namespace attnlab {

// nanoGPT's name for one of a causal LM's weights; "" for a name it has none for.
std::string nanogpt_name(const std::string& name);
// The model's weights under nanoGPT's names (lm_head.weight included when tied, as nanoGPT's state_dict has it).
std::map<std::string, Tensor> to_nanogpt(const Model& model);
// Loads weights given under nanoGPT's names (its causal-mask buffers `attn.bias` are ignored). A missing,
// unexpected or mis-shaped weight is std::invalid_argument naming each, in nanoGPT's names.
void load_nanogpt(Model& model, const std::map<std::string, Tensor>& weights);

}  // namespace attnlab
