// Schema: every key of a config struct described once (name, member, type and range, default, doc), and
// everything else derived from that one description: reading a YAML mapping into the struct (with
// ConfigNode's positioned errors and did-you-mean), writing the resolved struct back as YAML, the list
// of keys, the rows of the documentation table, and the keys on which two configs differ.
//
//   Schema<TrainConfig> s;
//   s.field("steps", &TrainConfig::steps, "optimizer steps", Range::at_least(1));
//   s.field("final_eval_batches", &TrainConfig::final_eval_batches, "...")
//       .derived_default("train.eval_batches", [](TrainConfig& t) { t.final_eval_batches = t.eval_batches; });
//   s.section("optimizer", &TrainConfig::optimizer, optimizer_schema());
//   s.rule([](const ConfigNode& node, TrainConfig& t) { if (...) node.fail("steps", "..."); });
//
// The default of a key is the value a default-constructed struct holds: defaults live in the struct.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/io/config_node.hpp"
#include "framework/tensor/enum_names.hpp"

namespace attnlab {

// One row of a documentation table.
struct KeyDoc {
  std::string key;           // dotted
  std::string default_text;  // the default as YAML would read it, or what it is derived from
  std::string values;        // "integer >= 1", "pre, post", ...
  std::string doc;
};

// A key on which two configs differ, with both values as text.
struct KeyDifference {
  std::string key, first, second;
};

// What a boolean key's KeyDoc::values says (the command line makes such an option a switch).
inline constexpr const char* kBooleanValues = "true, false";

namespace schema_detail {

// A number as the resolved config writes it (15 significant digits, no trailing zeros).
inline std::string number(double v) {
  std::ostringstream os;
  os.precision(15);
  os << v;
  return os.str();
}

template <class T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double>) {
    return number(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else {
    return std::to_string(v);
  }
}

template <class T>
std::string values_text(const Range& range) {
  if constexpr (std::is_same_v<T, bool>) {
    return kBooleanValues;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "text";
  } else {
    const std::string kind = std::is_same_v<T, double> ? "number" : "integer";
    if (std::is_unsigned_v<T> && !std::isfinite(range.low)) return kind + " >= 0";
    const std::string bounds = range.describe();
    return bounds == "any finite number" ? kind : kind + " " + bounds;
  }
}

inline std::string flow(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "{}";
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

}  // namespace schema_detail

template <class S>
class Schema {
 public:
  // A scalar member: bool, std::int64_t, std::size_t (also std::uint64_t), double or std::string.
  template <class T>
  Schema& field(std::string key, T S::*member, std::string doc, Range range = Range::any()) {
    return field<T>(std::move(key), member_getter(member), std::move(doc), range);
  }
  // The same for a value reached through `get` (T& (S&)), e.g. a member of a member.
  template <class T>
  Schema& field(std::string key, std::function<T&(S&)> get, std::string doc, Range range = Range::any()) {
    Field f = base<T>(key, get, std::move(doc));
    f.values = schema_detail::values_text<T>(range);
    f.read = [key, get, range](ConfigNode& node, S& s) { get(s) = node.get<T>(key, get(s), range); };
    return add(std::move(f));
  }
  // An enum spelled by the names of `names`.
  template <class E>
  Schema& choice(std::string key, E S::*member, const EnumNames<E>& names, std::string doc) {
    return choice<E>(std::move(key), member_getter(member), names, std::move(doc));
  }
  template <class E>
  Schema& choice(std::string key, std::function<E&(S&)> get, const EnumNames<E>& names, std::string doc) {
    Field f;
    f.key = key, f.doc = std::move(doc), f.values = enum_list(names);
    f.show = [get, names](const S& s) { return std::string(enum_name(names, get(const_cast<S&>(s)))); };
    f.default_text = f.show(S{});
    f.read = [key, get, names](ConfigNode& node, S& s) {
      std::vector<std::string> list;
      for (const auto& [name, value] : names) list.push_back(name);
      get(s) = parse_enum(names, node.get_choice(key, enum_name(names, get(s)), list), key);
    };
    f.write = [key, get, names](YAML::Emitter& out, const S& s) {
      out << YAML::Key << key << YAML::Value << enum_name(names, get(const_cast<S&>(s)));
    };
    return add(std::move(f));
  }
  // A set of enum values, written as a YAML list (a single name reads as a list of one).
  template <class E>
  Schema& choices(std::string key, std::set<E> S::*member, const EnumNames<E>& names, std::string doc) {
    auto get = member_getter(member);
    Field f;
    f.key = key, f.doc = std::move(doc), f.values = "a list of " + enum_list(names);
    f.show = [get, names](const S& s) {
      std::string text;
      for (const auto& [name, value] : names)
        if (get(const_cast<S&>(s)).count(value)) text += (text.empty() ? "" : ", ") + name;
      return "[" + text + "]";
    };
    f.default_text = f.show(S{});
    f.read = [key, get, names](ConfigNode& node, S& s) {
      std::vector<std::string> all, current;
      for (const auto& [name, value] : names) {
        all.push_back(name);
        if (get(s).count(value)) current.push_back(name);
      }
      get(s).clear();
      for (const std::string& name : node.get_choices(key, current, all)) get(s).insert(parse_enum(names, name, key));
    };
    f.write = [key, get, names](YAML::Emitter& out, const S& s) {
      out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const auto& [name, value] : names)
        if (get(const_cast<S&>(s)).count(value)) out << name;
      out << YAML::EndSeq;
    };
    return add(std::move(f));
  }
  // A text that must be one of the names `names()` returns when the config is read (a registry's).
  Schema& name(std::string key, std::string S::*member, std::function<std::vector<std::string>()> names, std::string doc) {
    auto get = member_getter(member);
    Field f = base<std::string>(key, get, std::move(doc));
    f.values_fn = [names] {
      std::string text;
      for (const std::string& n : names()) text += (text.empty() ? "" : ", ") + n;
      return text;
    };
    f.read = [key, get, names](ConfigNode& node, S& s) { get(s) = node.get_choice(key, get(s), names()); };
    return add(std::move(f));
  }
  // A YAML mapping kept as it is, for whoever reads it later (an attention kernel's own options).
  Schema& yaml(std::string key, YamlTree S::*member, std::string doc) {
    auto get = member_getter(member);
    Field f;
    f.key = key, f.doc = std::move(doc), f.values = "mapping";
    f.show = [get](const S& s) { return schema_detail::flow(get(const_cast<S&>(s)).node()); };
    f.default_text = f.show(S{});
    f.read = [key, get](ConfigNode& node, S& s) {
      const YAML::Node value = node.child(key);
      if (value.IsDefined() && !value.IsNull() && !value.IsMap()) {
        node.fail(key, "'" + node.dotted(key) + "' must be a mapping of keys to values");
      }
      if (value.IsDefined()) get(s) = YamlTree(value);
    };
    f.write = [key, get](YAML::Emitter& out, const S& s) {
      const YamlTree& value = get(const_cast<S&>(s));
      out << YAML::Key << key << YAML::Value;
      if (!value.empty()) {
        out << value.node();
      } else {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;  // "{}", as a read-back empty map writes itself
      }
    };
    return add(std::move(f));
  }
  // A nested section with its own schema.
  template <class T>
  Schema& section(std::string key, T S::*member, const Schema<T>& schema) {
    return section<T>(std::move(key), member_getter(member), schema);
  }
  template <class T>
  Schema& section(std::string key, std::function<T&(S&)> get, const Schema<T>& schema) {
    auto nested = std::make_shared<Schema<T>>(schema);
    Field f;
    f.key = key;
    f.read = [key, get, nested](ConfigNode& node, S& s) {
      ConfigNode child = node.section(key);
      nested->read(child, get(s));
    };
    f.write = [key, get, nested](YAML::Emitter& out, const S& s) {
      out << YAML::Key << key << YAML::Value;
      nested->write(out, get(const_cast<S&>(s)));
    };
    f.docs = [key, nested](const std::string& prefix, std::vector<KeyDoc>& out) {
      const std::vector<KeyDoc> rows = nested->docs(prefix + key + ".");
      out.insert(out.end(), rows.begin(), rows.end());
    };
    f.differences = [key, get, nested](const S& a, const S& b, const std::string& prefix, bool resumable,
                                       std::vector<KeyDifference>& out) {
      const auto d = nested->differences(get(const_cast<S&>(a)), get(const_cast<S&>(b)), prefix + key + ".", resumable);
      out.insert(out.end(), d.begin(), d.end());
    };
    f.shown_all = [key, get, nested](const S& s, const std::string& prefix) { return nested->shown(get(const_cast<S&>(s)), prefix + key + "."); };
    return add(std::move(f));
  }

  // The last field's default is derived from other keys after reading (when the key is absent); the
  // docs show `text` ("train.eval_batches") as its default.
  Schema& derived_default(std::string text, std::function<void(S&)> fill) {
    fields_.back().default_text = std::move(text);
    fields_.back().derive = std::move(fill);
    return *this;
  }
  // The docs show `text` as the last field's default instead of the struct's value (e.g. "(none)").
  Schema& default_shown_as(std::string text) {
    fields_.back().default_text = std::move(text);
    return *this;
  }
  // The last field may differ between a run and its resumption (train.steps to extend it, log cadence).
  Schema& resumable() {
    fields_.back().resumable = true;
    return *this;
  }
  // A check across fields, run after every field is read and every derived default filled.
  Schema& rule(std::function<void(const ConfigNode&, S&)> check) {
    rules_.push_back(std::move(check));
    return *this;
  }

  // Reads every key of `node` into `s` (absent keys keep the value `s` holds), then the derived defaults,
  // the rules, and the check for unknown keys.
  void read(ConfigNode& node, S& s) const {
    for (const Field& f : fields_) node.allow(f.key);
    for (const Field& f : fields_) f.read(node, s);
    for (const Field& f : fields_)
      if (f.derive && !node.has(f.key)) f.derive(s);
    for (const auto& check : rules_) check(node, s);
    node.finish();
  }
  // `s` as a YAML mapping, every key in declaration order.
  void write(YAML::Emitter& out, const S& s) const {
    out << YAML::BeginMap;
    write_fields(out, s);
    out << YAML::EndMap;
  }
  // The same keys into a mapping the caller has begun (a component's keys beside its name).
  void write_fields(YAML::Emitter& out, const S& s) const {
    for (const Field& f : fields_) f.write(out, s);
  }
  // Every key of `s` with its value as text (sections' keys dotted under theirs).
  std::vector<std::pair<std::string, std::string>> shown(const S& s, const std::string& prefix = "") const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const Field& f : fields_) {
      if (f.shown_all) {
        const auto nested = f.shown_all(s, prefix);
        out.insert(out.end(), nested.begin(), nested.end());
      } else {
        out.emplace_back(prefix + f.key, f.show(s));
      }
    }
    return out;
  }
  // The documentation rows of every key, dotted under `prefix` ("train.").
  std::vector<KeyDoc> docs(const std::string& prefix = "") const {
    std::vector<KeyDoc> out;
    for (const Field& f : fields_) {
      if (f.docs) {
        f.docs(prefix, out);
      } else {
        out.push_back(KeyDoc{prefix + f.key, f.default_text, f.values_fn ? f.values_fn() : f.values, f.doc});
      }
    }
    return out;
  }
  std::vector<std::string> keys(const std::string& prefix = "") const {
    std::vector<std::string> out;
    for (const KeyDoc& d : docs(prefix)) out.push_back(d.key);
    return out;
  }
  // The keys on which `a` and `b` differ (every key, or only those not marked resumable).
  std::vector<KeyDifference> differences(const S& a, const S& b, const std::string& prefix = "", bool include_resumable = true) const {
    std::vector<KeyDifference> out;
    for (const Field& f : fields_) {
      if (f.differences) {
        f.differences(a, b, prefix, include_resumable, out);
      } else if ((include_resumable || !f.resumable) && f.show(a) != f.show(b)) {
        out.push_back(KeyDifference{prefix + f.key, f.show(a), f.show(b)});
      }
    }
    return out;
  }

  // One key's handling, for fields that the methods above do not cover (framework/io/component.hpp's
  // components: a name and the chosen component's keys beside it).
  struct Field {
    std::string key, doc, values, default_text;
    std::function<std::string()> values_fn;  // values known only at run time (registries)
    bool resumable = false;
    std::function<void(ConfigNode&, S&)> read;
    std::function<void(YAML::Emitter&, const S&)> write;
    std::function<std::string(const S&)> show;
    std::function<void(S&)> derive;
    std::function<void(const std::string&, std::vector<KeyDoc>&)> docs;  // sections only
    std::function<void(const S&, const S&, const std::string&, bool, std::vector<KeyDifference>&)> differences;  // sections only
    std::function<std::vector<std::pair<std::string, std::string>>(const S&, const std::string&)> shown_all;   // sections only
  };

  Schema& add(Field f) {
    for (const Field& g : fields_)
      if (g.key == f.key) throw std::logic_error("config schema: key '" + f.key + "' is described twice");
    fields_.push_back(std::move(f));
    return *this;
  }

 private:
  template <class T>
  static std::function<T&(S&)> member_getter(T S::*member) {
    return [member](S& s) -> T& { return s.*member; };
  }
  // The parts every scalar shares: show, default text, write.
  template <class T>
  static Field base(const std::string& key, std::function<T&(S&)> get, std::string doc) {
    Field f;
    f.key = key, f.doc = std::move(doc);
    f.show = [get](const S& s) { return schema_detail::show(get(const_cast<S&>(s))); };
    f.default_text = f.show(S{});
    if constexpr (std::is_same_v<T, std::string>) {
      if (f.default_text.empty()) f.default_text = "\"\"";
    }
    f.write = [key, get](YAML::Emitter& out, const S& s) { out << YAML::Key << key << YAML::Value << get(const_cast<S&>(s)); };
    return f;
  }

  std::vector<Field> fields_;
  std::vector<std::function<void(const ConfigNode&, S&)>> rules_;
};

// The YAML text of `s` (every key), as a resolved config file holds it.
template <class S>
std::string to_yaml(const Schema<S>& schema, const S& s) {
  YAML::Emitter out;
  out.SetDoublePrecision(15);  // decimal values written as they were given (0.1, not 0.10000000000000001)
  schema.write(out, s);
  return std::string(out.c_str()) + "\n";
}

}  // namespace attnlab
