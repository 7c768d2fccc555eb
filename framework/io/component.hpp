// Components a config chooses by name: an attention kernel, a task, a model kind, an optimizer. Each
// declares its options once, as an Options struct (defaults in its members) with a Schema, and registers
// with one line; the registry keeps what config reading, resolved configs and docs need of them
// (OptionsSpec), so no other place lists a component's keys.
//
//   struct MyThing {
//     static constexpr const char* kName = "my_thing";
//     static constexpr const char* kDescription = "what it is";
//     struct Options { std::size_t size = 8; };
//     static Schema<Options> options_schema();  // each option described once
//     // optional: static void check(const Options&, const ConfigNode&);  checks across options, at their keys
//   };
//
// A component's options are kept as the config gave them (ComponentOptions: the YAML mapping with its
// path and where each value came from, file positions or overrides) and read through its schema where it
// is checked and where it is built: read_options<C>(options).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/io/config_schema.hpp"
#include "framework/tensor/registry.hpp"

namespace attnlab {

// A component's options as the config holds them: the YAML mapping (null: every default), its dotted path
// for messages ("model.attention.options", "task"), and where its values came from.
struct ComponentOptions {
  ComponentOptions(YAML::Node node = YAML::Node(), std::string path = "", ConfigSourcePtr source = nullptr)
      : node(node), path(std::move(path)), source(std::move(source)) {}
  YamlTree node;
  std::string path;
  ConfigSourcePtr source;
  // A ConfigNode over the options (a source without a file when none is given).
  ConfigNode config_node() const { return ConfigNode(node.node(), path, source ? source : std::make_shared<ConfigSource>()); }
  // Sets one option as a config would (`value` as its YAML text reads: "true", "rotary", "4"), on a copy
  // of the mapping, so that copies of a config made before do not change with it.
  ComponentOptions& set(const std::string& key, const std::string& value) {
    YAML::Node copy = node.node().IsMap() ? YAML::Clone(node.node()) : YAML::Node(YAML::NodeType::Map);
    copy[key] = YAML::Load(value);
    node = YamlTree(copy);
    return *this;
  }
};

// What a registry keeps of a component's options, from its Options and schema (options_spec<C>()).
struct OptionsSpec {
  std::vector<KeyDoc> docs;  // one row per key (no prefix): default, values, doc
  // Reads and checks the options (positioned errors: a bad value, an unknown key with did-you-mean).
  std::function<void(const ComponentOptions&)> check;
  // The options resolved (every key, defaults filled in), in declaration order, as a resolved config
  // writes them; and as key -> text, for comparing two configs.
  std::function<void(YAML::Emitter&, const ComponentOptions&)> write;
  std::function<std::vector<std::pair<std::string, std::string>>(const ComponentOptions&)> shown;
  // Whether `value` for `key` reads as the key's default (a key of another component left at its
  // default, as resolved configs of older versions wrote every component's keys, is let pass).
  std::function<bool(const std::string& key, const YAML::Node& value)> is_default;
  // Whether `key` is one of its options, or a section holding some ("cross_attention" for
  // "cross_attention.name").
  bool reads(const std::string& key) const {
    for (const KeyDoc& d : docs)
      if (d.key == key || d.key.compare(0, key.size() + 1, key + ".") == 0) return true;
    return false;
  }
};

namespace component_detail {
template <class C, class = void>
struct has_check : std::false_type {};
template <class C>
struct has_check<C, std::void_t<decltype(C::check(std::declval<const typename C::Options&>(), std::declval<const ConfigNode&>()))>>
    : std::true_type {};
}  // namespace component_detail

// C's options read from `options` through its schema, and (unless `checked` is false: a listing of
// what a component does with its defaults) checked.
template <class C>
typename C::Options read_options(const ComponentOptions& options, bool checked = true) {
  ConfigNode node = options.config_node();
  typename C::Options o;
  C::options_schema().read(node, o);
  if constexpr (component_detail::has_check<C>::value) {
    if (checked) C::check(o, node);
  }
  return o;
}

template <class C>
OptionsSpec options_spec() {
  using Options = typename C::Options;
  OptionsSpec spec;
  spec.docs = C::options_schema().docs();
  spec.check = [](const ComponentOptions& options) { read_options<C>(options); };
  spec.write = [](YAML::Emitter& out, const ComponentOptions& options) { C::options_schema().write_fields(out, read_options<C>(options)); };
  spec.shown = [](const ComponentOptions& options) { return C::options_schema().shown(read_options<C>(options)); };
  spec.is_default = [](const std::string& key, const YAML::Node& value) {
    YAML::Node one(YAML::NodeType::Map);
    one[key] = YAML::Clone(value);
    try {
      ConfigNode node(one, "", std::make_shared<ConfigSource>());
      Options read;
      C::options_schema().read(node, read);
      return C::options_schema().differences(read, Options{}).empty();
    } catch (const std::exception&) {
      return false;
    }
  };
  return spec;
}

// A section of a config that names one component of `Info`'s registry by `chooser` ("name", "kind") with
// the component's own keys beside it, as Schema::component reads it.
struct ComponentChoice {
  std::string name;
  ComponentOptions options;
};

// Adds to `schema` the key `chooser` ("name", "kind") naming a component of the registry `registry()`,
// whose own keys sit beside it in the same mapping (task: {name: copy, length: 8}). Reading keeps the
// chosen component's keys in get(s).options and checks them through its schema; a key another
// component reads is an error naming who reads it, unless it holds that component's default (resolved
// configs of older versions listed every component's keys); any other unknown key is left to the
// section's check (did-you-mean). Writing puts the chosen component's keys, resolved, after the name.
template <class S, class Info>
Schema<S>& add_component(Schema<S>& schema, const std::string& chooser, std::function<ComponentChoice&(S&)> get,
                         std::function<const Registry<Info>&()> registry, std::string doc) {
  typename Schema<S>::Field f;
  f.key = chooser, f.doc = std::move(doc);
  f.values_fn = [registry] {
    std::string text;
    for (const std::string& n : registry().names()) text += (text.empty() ? "" : ", ") + n;
    return text;
  };
  f.show = [get](const S& s) { return get(const_cast<S&>(s)).name; };
  f.default_text = f.show(S{});
  f.read = [chooser, get, registry](ConfigNode& node, S& s) {
    ComponentChoice& c = get(s);
    c.name = node.get_choice(chooser, c.name, registry().names());
    const Info& chosen = registry().find(c.name);
    YAML::Node own(YAML::NodeType::Map);
    if (node.node().IsMap()) {
      for (const auto& kv : node.node()) {
        const std::string key = kv.first.Scalar();
        if (key == chooser) continue;
        if (chosen.options.reads(key)) {
          own[key] = kv.second;  // the same node: positions and overrides stay known
          node.allow(key);
          continue;
        }
        std::string readers;
        bool at_default = true;
        for (const std::string& other : registry().names()) {
          const Info& info = registry().find(other);
          if (other == c.name || !info.options.reads(key)) continue;
          readers += (readers.empty() ? "" : ", ") + other;
          at_default = at_default && info.options.is_default(key, kv.second);
        }
        if (readers.empty()) continue;  // unknown to every component: the section's check says so
        if (!at_default) {
          std::string own_keys;
          for (const KeyDoc& d : chosen.options.docs) own_keys += (own_keys.empty() ? "" : ", ") + node.dotted(d.key);
          node.fail(key, node.dotted(key) + " is read by " + node.dotted(chooser) + " " + readers + ", not by " + c.name +
                             (own_keys.empty() ? " (which reads no other key)" : " (which reads " + own_keys + ")") + "; remove it");
        }
        node.allow(key);
      }
    }
    c.options = ComponentOptions(own, node.path(), node.source_ptr());
    try {
      chosen.options.check(c.options);
    } catch (const ConfigError& error) {  // about a key that is not there (required, say): at the component's name
      if (error.line() == 0 && error.origin().empty()) node.fail(chooser, error.message());
      throw;
    }
  };
  f.write = [chooser, get, registry](YAML::Emitter& out, const S& s) {
    const ComponentChoice& c = get(const_cast<S&>(s));
    out << YAML::Key << chooser << YAML::Value << c.name;
    registry().find(c.name).options.write(out, c.options);
  };
  f.shown_all = [chooser, get, registry](const S& s, const std::string& prefix) {
    const ComponentChoice& c = get(const_cast<S&>(s));
    std::vector<std::pair<std::string, std::string>> out{{prefix + chooser, c.name}};
    for (const auto& [key, value] : registry().find(c.name).options.shown(c.options)) out.emplace_back(prefix + key, value);
    return out;
  };
  f.differences = [f_shown = f.shown_all](const S& a, const S& b, const std::string& prefix, bool, std::vector<KeyDifference>& out) {
    const auto x = f_shown(a, prefix), y = f_shown(b, prefix);
    // (Each pair by name, not as a structured binding: a lambda may capture those only from C++20.)
    for (const auto& shown : x) {
      const std::string& key = shown.first;
      const auto it = std::find_if(y.begin(), y.end(), [&](const auto& kv) { return kv.first == key; });
      const std::string other = it == y.end() ? "(not read)" : it->second;
      if (other != shown.second) out.push_back(KeyDifference{key, shown.second, other});
    }
    for (const auto& shown : y)
      if (std::none_of(x.begin(), x.end(), [&](const auto& kv) { return kv.first == shown.first; }))
        out.push_back(KeyDifference{shown.first, "(not read)", shown.second});
  };
  return schema.add(std::move(f));
}

// The documentation rows of every component of `registry()`, each key dotted under `prefix` ("task."),
// grouped by component: {name, rows}.
template <class Info>
std::vector<std::pair<std::string, std::vector<KeyDoc>>> component_docs(const Registry<Info>& registry, const std::string& prefix) {
  std::vector<std::pair<std::string, std::vector<KeyDoc>>> out;
  for (const std::string& name : registry.names()) {
    std::vector<KeyDoc> rows = registry.find(name).options.docs;
    for (KeyDoc& d : rows) d.key = prefix + d.key;
    out.emplace_back(name, rows);
  }
  return out;
}

}  // namespace attnlab
