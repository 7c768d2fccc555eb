#include "framework/nn/hooks.hpp"

#include <stdexcept>

namespace attnlab {

bool hook_name_matches(const std::string& pattern, const std::string& name) {
  // Iterative wildcard matching: on a mismatch, let the last '*' absorb one more character.
  std::size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p, ++n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

ActivationHooks::ActivationHooks(HookRequest request)
    : request_(std::move(request)),
      cache_matched_(request_.cache.size(), false),
      replace_matched_(request_.replace.size(), false) {}

bool ActivationHooks::wants(const std::string& name) {
  seen_.insert(name);
  for (const std::string& pattern : request_.cache)
    if (hook_name_matches(pattern, name)) return true;
  for (const auto& [pattern, fn] : request_.replace)
    if (hook_name_matches(pattern, name)) return true;
  return false;
}

Tensor ActivationHooks::apply(const std::string& name, const Tensor& value) {
  seen_.insert(name);
  Tensor out = value;
  for (std::size_t i = 0; i < request_.replace.size(); ++i) {
    if (!hook_name_matches(request_.replace[i].first, name)) continue;
    replace_matched_[i] = true;
    const Tensor replaced = request_.replace[i].second(out, name);
    if (!replaced.defined() || replaced.shape() != out.shape() || replaced.dtype() != out.dtype()) {
      throw std::invalid_argument("the replacement of activation " + name + " must keep its shape " + shape_str(out.shape()) +
                                  " and dtype " + dtype_name(out.dtype()));
    }
    out = replaced;
  }
  for (std::size_t i = 0; i < request_.cache.size(); ++i) {
    if (!hook_name_matches(request_.cache[i], name)) continue;
    cache_matched_[i] = true;
    cache_[name] = out;
  }
  return out;
}

void ActivationHooks::check_all_matched() const {
  auto fail = [&](const std::string& pattern) {
    std::string names;
    for (const std::string& n : seen_) names += (names.empty() ? "" : ", ") + n;
    throw UnknownActivation("no activation of this model is named '" + pattern + "'; its names are [" + names + "]");
  };
  for (std::size_t i = 0; i < request_.cache.size(); ++i)
    if (!cache_matched_[i]) fail(request_.cache[i]);
  for (std::size_t i = 0; i < request_.replace.size(); ++i)
    if (!replace_matched_[i]) fail(request_.replace[i].first);
}

}  // namespace attnlab
