#include "framework/models/gpt_weights.hpp"

#include <regex>
#include <stdexcept>

namespace attnlab {

std::string nanogpt_name(const std::string& name) {
  static const std::pair<std::regex, std::string> rules[] = {
      {std::regex("body\\.tok\\.weight"), "transformer.wte.weight"},
      {std::regex("body\\.pos\\.table"), "transformer.wpe.weight"},
      {std::regex("body\\.encoder\\.blocks\\.(\\d+)\\.norm1\\.(weight|bias)"), "transformer.h.$1.ln_1.$2"},
      {std::regex("body\\.encoder\\.blocks\\.(\\d+)\\.attn\\.qkv\\.(weight|bias)"), "transformer.h.$1.attn.c_attn.$2"},
      {std::regex("body\\.encoder\\.blocks\\.(\\d+)\\.attn\\.proj\\.(weight|bias)"), "transformer.h.$1.attn.c_proj.$2"},
      {std::regex("body\\.encoder\\.blocks\\.(\\d+)\\.norm2\\.(weight|bias)"), "transformer.h.$1.ln_2.$2"},
      {std::regex("body\\.encoder\\.blocks\\.(\\d+)\\.ff\\.fc1\\.(weight|bias)"), "transformer.h.$1.mlp.c_fc.$2"},
      {std::regex("body\\.encoder\\.blocks\\.(\\d+)\\.ff\\.fc2\\.(weight|bias)"), "transformer.h.$1.mlp.c_proj.$2"},
      {std::regex("body\\.encoder\\.final_norm\\.(weight|bias)"), "transformer.ln_f.$1"},
      {std::regex("head\\.weight"), "lm_head.weight"},
  };
  for (const auto& [pattern, replacement] : rules)
    if (std::regex_match(name, pattern)) return std::regex_replace(name, pattern, replacement);
  return "";
}

namespace {

// The model's parameters by nanoGPT's name; a model nanoGPT cannot describe is an error saying why.
std::map<std::string, Tensor> nanogpt_parameters(const Model& model) {
  if (!model.predicts_next_token()) throw std::invalid_argument("nanoGPT's weights are a causal language model's: use model.kind causal_lm");
  if (!model.final_norm()) throw std::invalid_argument("nanoGPT's blocks are pre-norm: use model.norm pre");
  std::map<std::string, Tensor> out;
  for (const NamedParameter& p : model.named_parameters()) {
    const std::string name = nanogpt_name(p.name);
    if (name.empty()) throw std::invalid_argument("nanoGPT has no weight like " + p.name + " (learned positions, GELU MLP and no extras)");
    out.emplace(name, p.tensor);
  }
  if (!out.count("transformer.wpe.weight")) throw std::invalid_argument("nanoGPT's positions are learned: use model.positional learned");
  return out;
}

}  // namespace

std::map<std::string, Tensor> to_nanogpt(const Model& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : nanogpt_parameters(model)) out.emplace(name, t.detach());
  if (!out.count("lm_head.weight")) out.emplace("lm_head.weight", out.at("transformer.wte.weight"));  // tied
  return out;
}

void load_nanogpt(Model& model, const std::map<std::string, Tensor>& weights) {
  const std::map<std::string, Tensor> own = nanogpt_parameters(model);
  std::string problems;
  for (const auto& [name, t] : own) {
    const auto it = weights.find(name);
    if (it == weights.end()) {
      problems += "\n  missing: " + name + " " + shape_str(t.shape());
      continue;
    }
    const Shape& given = it->second.shape();
    const bool positions = name == "transformer.wpe.weight" && given.size() == 2 && given[0] >= t.size(0) && given[1] == t.size(1);
    if (given != t.shape() && !positions) problems += "\n  " + name + ": given " + shape_str(given) + ", the model has " + shape_str(t.shape());
  }
  const bool tied = !own.count("lm_head.weight");
  for (const auto& [name, t] : weights) {
    const std::string suffix = ".attn.bias";  // nanoGPT's causal mask buffer (without flash attention)
    const bool mask = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (!own.count(name) && !mask && !(tied && name == "lm_head.weight")) problems += "\n  unexpected: " + name;
  }
  // nanoGPT ties the two, so its state_dict holds lm_head.weight equal to wte; a different one belongs to
  // an untied model and would be dropped here without a word.
  const auto head = weights.find("lm_head.weight"), wte = weights.find("transformer.wte.weight");
  if (tied && head != weights.end() && wte != weights.end() &&
      (head->second.shape() != wte->second.shape() || head->second.to_vector() != wte->second.to_vector())) {
    problems += "\n  lm_head.weight differs from transformer.wte.weight, but this model ties them (model.tie_embeddings: true); "
                "load these weights into an untied model (model.tie_embeddings=false)";
  }
  if (!problems.empty()) throw std::invalid_argument("the nanoGPT weights do not match the model:" + problems);
  // Under attnlab's names, wpe cut to the model's positions, loaded by the model's own checked copy.
  std::map<std::string, Tensor> renamed;
  for (const NamedParameter& p : model.named_parameters()) {
    const std::string name = nanogpt_name(p.name);
    Tensor given = weights.at(name);
    if (given.size(0) > p.tensor.size(0)) given = slice(given, 0, 0, static_cast<std::int64_t>(p.tensor.size(0)));  // wpe: its first rows
    renamed.emplace(p.name, given);
  }
  model.load_weights(renamed);
}

}  // namespace attnlab
