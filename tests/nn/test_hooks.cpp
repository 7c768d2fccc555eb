// Named activations: name patterns, what a forward caches and replaces, and the errors for names that do
// not exist and replacements that change a shape.
#include <gtest/gtest.h>

#include "framework/nn/hooks.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {
namespace {

TEST(HookNames, StarMatchesAnyRunOfCharactersDotsIncluded) {
  EXPECT_TRUE(hook_name_matches("blocks.0.attn.hook_z", "blocks.0.attn.hook_z"));
  EXPECT_FALSE(hook_name_matches("blocks.0.attn.hook_z", "blocks.0.attn.hook_zz"));
  EXPECT_TRUE(hook_name_matches("blocks.*.attn.hook_pattern", "blocks.11.attn.hook_pattern"));
  EXPECT_FALSE(hook_name_matches("blocks.*.attn.hook_pattern", "blocks.1.attn.hook_z"));
  EXPECT_TRUE(hook_name_matches("*hook_resid_*", "blocks.1.hook_resid_mid"));
  EXPECT_TRUE(hook_name_matches("*", "anything.at.all"));
  EXPECT_FALSE(hook_name_matches("blocks.*", "hook_embed"));
  EXPECT_TRUE(hook_name_matches("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(hook_name_matches("a*b*c", "aXbYbZ"));
}

TEST(ActivationHooks, CacheWhatFlowsOnAfterReplacements) {
  HookRequest request;
  request.cache = {"x.*"};
  request.replace = {{"x.double", [](const Tensor& t, const std::string& name) {
                        EXPECT_EQ(name, "x.double");
                        return t * 2.0;
                      }}};
  ActivationHooks hooks(request);
  const HookScope scope(&hooks, "x.");
  const Tensor a = full({2}, 3.0), b = full({2}, 5.0);
  EXPECT_TRUE(scope("same", a).same(a));  // cached, not replaced: the tensor itself flows on
  EXPECT_EQ(scope("double", b).to_vector(), (std::vector<double>{10, 10}));
  EXPECT_TRUE(scope.wants("double"));
  EXPECT_FALSE(HookScope(&hooks, "y.").wants("same"));
  EXPECT_NO_THROW(hooks.check_all_matched());
  const auto cache = hooks.take_cache();
  EXPECT_EQ(cache.at("x.double").to_vector(), (std::vector<double>{10, 10}));
  EXPECT_EQ(cache.size(), 2u);
}

TEST(ActivationHooks, AnInactiveScopeIsTheIdentity) {
  const HookScope none;
  const Tensor a = full({2}, 1.0);
  EXPECT_FALSE(none.active());
  EXPECT_FALSE(none.wants("anything"));
  EXPECT_TRUE(none("anything", a).same(a));
  EXPECT_FALSE(none.child("blocks.0").active());
}

TEST(ActivationHooks, NamesThatMatchNothingAndShapeChangesAreErrors) {
  HookRequest request;
  request.cache = {"blocks.7.attn.hook_z"};
  ActivationHooks hooks(request);
  HookScope(&hooks, "blocks.0.")("hook_resid_pre", full({1}, 0.0));
  try {
    hooks.check_all_matched();
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'blocks.7.attn.hook_z'"), std::string::npos) << m;
    EXPECT_NE(m.find("blocks.0.hook_resid_pre"), std::string::npos) << m;  // the names it has
  }
  HookRequest reshape_it;
  reshape_it.replace = {{"a", [](const Tensor&, const std::string&) { return full({3}, 0.0); }}};
  ActivationHooks bad(reshape_it);
  EXPECT_THROW(HookScope(&bad, "")("a", full({2}, 0.0)), std::invalid_argument);
}

}  // namespace
}  // namespace attnlab
