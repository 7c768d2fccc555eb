// attnlab.Model and attnlab.Data: a model run on arrays with any named activations cached or replaced by
// Python functions (TransformerLens's run_with_cache and run_with_hooks), its weights as arrays, and the
// data of its config: held-out batches, token names, patching pairs.
#include <pybind11/stl.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "experiments/analysis/analysis.hpp"
#include "experiments/python/arrays.hpp"
#include "experiments/python/bindings.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/config_node.hpp"
#include "framework/models/gpt_weights.hpp"
#include "framework/models/text_models.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab::python {
namespace {

// The batch a forward reads: tokens [B, T] (or images [B, C, H, W]) with their optional masks and, for an
// encoder-decoder, the decoder's input.
// A detection pattern from Python: a detector's name, or a [T, T] array for inputs of T tokens.
DetectionPattern detection_from_python(const py::object& detection) {
  if (py::isinstance<py::str>(detection)) {
    const std::string name = py::str(detection);
    const std::vector<DetectorKind> kinds = detector_kinds();
    const auto kind = std::find_if(kinds.begin(), kinds.end(), [&](DetectorKind k) { return name == detector_name(k); });
    if (kind == kinds.end()) {
      throw std::invalid_argument("detection '" + name + "' is none of previous_token_head, duplicate_token_head, induction_head; or give a [T, T] array");
    }
    return [k = *kind](const std::vector<std::int64_t>& tokens) { return detection_pattern(k, tokens); };
  }
  const Tensor d = from_numpy(detection, Want::floating, "detection");
  if (d.dim() != 2 || d.size(0) != d.size(1)) throw std::invalid_argument("detection must be a name or a [T, T] array, got " + shape_str(d.shape()));
  return [v = d.to_vector(), t = d.size(0)](const std::vector<std::int64_t>& tokens) {
    if (tokens.size() != t) {
      throw std::invalid_argument("detection is [" + std::to_string(t) + ", " + std::to_string(t) + "] but a row has " + std::to_string(tokens.size()) +
                                  " positions (its real tokens, after a CLS the model puts first): a pattern of one's own needs inputs of its length without padding");
    }
    return v;
  };
}

Batch batch_of(const ModelHandle& h, const py::object& input, const py::object& padding_mask, const py::object& decoder_input,
               const py::object& decoder_padding_mask) {
  Batch b;
  const bool images = !h.data->token_inputs();
  b.input = from_numpy(input, images ? Want::images : Want::tokens, "input");
  const DataShape shape = h.data->shape();
  const auto check_ids = [](const Tensor& t, std::size_t vocabulary, const char* what) {
    const std::int64_t* ids = t.data<std::int64_t>();
    for (std::size_t i = 0; i < t.numel(); ++i)
      if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocabulary) {
        throw py::value_error(std::string(what) + ": token id " + std::to_string(ids[i]) + " at flat position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocabulary) + ")");
      }
  };
  if (!images) check_ids(b.input, shape.vocab_size, "input");
  if (!padding_mask.is_none()) b.key_padding_mask = from_numpy(padding_mask, Want::mask, "padding_mask");
  if (b.key_padding_mask.defined() && b.key_padding_mask.shape() != Shape{b.input.size(0), b.input.size(1)}) {
    throw py::value_error("padding_mask must have the input's shape [batch, tokens]");
  }
  if (shape.target_max_len == 0 && (!decoder_input.is_none() || !decoder_padding_mask.is_none())) {
    throw py::value_error(std::string(decoder_input.is_none() ? "decoder_padding_mask" : "decoder_input") + " is for an encoder-decoder; this model (" +
                          h.config.model.kind.name + ") reads input alone");
  }
  if (!decoder_input.is_none()) {
    b.decoder_input = from_numpy(decoder_input, Want::tokens, "decoder_input");
    check_ids(b.decoder_input, shape.num_classes, "decoder_input");
  }
  if (!decoder_padding_mask.is_none()) b.decoder_padding_mask = from_numpy(decoder_padding_mask, Want::mask, "decoder_padding_mask");
  if (shape.target_max_len > 0 && !b.decoder_input.defined()) {
    throw py::value_error("this is an encoder-decoder: give decoder_input (BOS, then the answer so far) as well as input");
  }
  return b;
}

// One forward in eval mode without a graph, the interpreter free while it runs (hooks take it back).
std::map<std::string, Tensor> forward(ModelHandle& h, const Batch& batch, HookRequest hooks, Tensor& logits) {
  ForwardOptions o;
  o.hooks = std::move(hooks);
  py::gil_scoped_release free;
  EvalScope scope(*h.model);
  ModelOutput out = h.model->forward(batch, o);
  logits = out.logits;
  return std::move(out.cache);
}

// A Python hook as an activation function: it receives a copy of the activation as an array and the
// hook's name, and returns the array that flows on (None: its argument, as it may have changed it in place).
ActivationFn python_hook(py::object fn) {
  // The forward copies its hooks with the interpreter released: the copies share one reference to fn,
  // dropped with the interpreter held, so no Python reference count changes without it.
  const std::shared_ptr<py::object> held(new py::object(std::move(fn)), [](py::object* f) {
    py::gil_scoped_acquire hold;
    delete f;
  });
  return [held](const Tensor& value, const std::string& name) {
    py::gil_scoped_acquire hold;
    const Tensor copy = value.clone();
    py::object arg = to_numpy(copy);
    py::object result = (*held)(arg, name);
    if (result.is_none()) return copy;
    Tensor t = from_numpy(result, Want::floating, "the hook on " + name + "'s result").to(value.dtype());
    if (t.shape() != value.shape()) {
      throw py::value_error("the hook on " + name + " returned shape " + shape_str(t.shape()) + "; the activation's is " + shape_str(value.shape()));
    }
    return t;
  };
}

// The name of token `id` at `position`; an id outside the vocabulary is a ValueError (a toy task names
// its symbols by number, so a made-up name would read as a real token).
std::string token_name(const data::DataSource& d, std::int64_t id, std::size_t position) {
  const std::size_t vocabulary = d.shape().vocab_size;
  if (d.token_inputs() && (id < 0 || static_cast<std::size_t>(id) >= vocabulary)) {
    throw py::value_error("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocabulary) + ")");
  }
  return d.token_label(id, position);
}

py::dict arrays_of(const std::map<std::string, Tensor>& tensors) {
  py::dict d;
  for (const auto& [name, t] : tensors) d[py::str(name)] = to_numpy(t);
  return d;
}

py::dict batch_dict(const Batch& b) {
  py::dict d;
  const std::pair<const char*, const Tensor*> parts[] = {{"input", &b.input}, {"target", &b.target}, {"padding_mask", &b.key_padding_mask},
                                                         {"decoder_input", &b.decoder_input}, {"decoder_padding_mask", &b.decoder_padding_mask}};
  for (const auto& [name, t] : parts)
    if (t->defined()) d[name] = to_numpy(*t);
  return d;
}

// TransformerLens's detect_head on a Model.
void bind_detect_heads(py::class_<ModelHandle>& model) {
  model      .def("detect_heads",
           [](ModelHandle& h, const py::object& input, const py::object& detection, bool exclude_bos, bool exclude_current_token,
              const std::string& error_measure, bool scored_rows, const py::object& pm) {
             DetectorOptions o{exclude_bos, exclude_current_token, parse_enum(error_measure_names(), error_measure, "error_measure"), scored_rows};
             const DetectionPattern pattern = detection_from_python(detection);
             const Batch b = batch_of(h, input, pm, py::none(), py::none());
             const std::vector<double> scores = detect_heads(*h.model, *h.data, b, pattern, o);
             return to_numpy(from_vector(scores, {scores.size() / h.model->n_heads(), h.model->n_heads()}, DType::float64));
           },
           py::arg("input"), py::arg("detection"), py::arg("exclude_bos") = false, py::arg("exclude_current_token") = false,
           py::arg("error_measure") = "mul", py::arg("scored_rows") = false, py::arg("padding_mask") = py::none(),
           "TransformerLens's detect_head: each head's mean score [layers, heads] against a named detection pattern or a [T, T] array");
}

// A causal LM's continuation of a prompt, as `attnlab sample` makes it.
void bind_generate(py::class_<ModelHandle>& model) {
  model.def("generate",
           [](ModelHandle& h, const std::vector<std::int64_t>& prompt, std::int64_t tokens_arg, double temperature, std::int64_t top_k_arg,
              std::uint64_t seed, bool cache) {
             const std::size_t tokens = checked_count(tokens_arg, "generate", "tokens"), top_k = checked_count(top_k_arg, "generate", "top_k");
             auto* lm = dynamic_cast<CausalLM*>(h.model.get());
             if (!lm) throw py::value_error("generate needs a causal_lm model; this one is a " + h.config.model.kind.name);
             Generator gen(seed);
             std::vector<std::int64_t> out;
             // Ctrl-C ends a long generation: Python's signal handlers run between tokens (the interpreter
             // held only for that), and KeyboardInterrupt is raised once the model is back in its mode.
             struct Interrupted {};
             const auto between_tokens = [](std::int64_t) {
               py::gil_scoped_acquire hold;
               if (PyErr_CheckSignals() != 0) throw Interrupted{};
             };
             try {
               py::gil_scoped_release release;
               out = lm->generate(prompt, tokens, temperature, top_k, gen, cache ? Decoding::cached : Decoding::recomputed, between_tokens);
             } catch (const Interrupted&) {
               throw py::error_already_set();  // the exception the handler set (KeyboardInterrupt)
             }
             return to_numpy(from_indices(out, {out.size()}));
           },
           py::arg("prompt"), py::arg("tokens"), py::arg("temperature") = 0.0, py::arg("top_k") = 0, py::arg("seed") = 0,
           py::arg("cache") = true,
           "a causal LM's continuation of `prompt` (token ids) as `attnlab sample` makes it: `tokens` new ids, the most likely at "
           "temperature 0, else drawn (top_k 0: from the whole vocabulary) with `seed`; cache=False recomputes the window per token");
}

// What nanoGPT's architecture has that the weights do not show (to_nanogpt / load_nanogpt check the
// rest from the model): softmax attention at 1/sqrt(head_dim), a GELU MLP. Another kernel's model would
// load without a word and give other logits (found in review).
void check_nanogpt_architecture(const ExperimentConfig& c) {
  const EncoderConfig& e = c.model.encoder;
  if (!KernelRegistry::instance().find(e.attention).capabilities.full_softmax) {
    throw py::value_error("nanoGPT's attention is softmax over every earlier token: this model's is " + e.attention + " (model.attention.name)");
  }
  const YAML::Node scale = e.attention_options.node()["scale"];
  if (scale.IsDefined() && scale.as<double>() != 0.0) throw py::value_error("nanoGPT scales scores by 1/sqrt(head_dim): use model.attention.options.scale 0");
  if (e.activation != Activation::gelu) throw py::value_error("nanoGPT's MLP is GELU: use model.activation gelu");
}

// The weights, both ways: attnlab's names (state_dict, an export's arrays) and nanoGPT's.
void bind_weights(py::class_<ModelHandle>& model) {
  model
      .def_static("from_nanogpt",
                  [](const py::dict& weights, const py::object& c, const std::vector<std::string>& o) {
                    ModelHandle h = model_from_config(config_from(c, o));
                    check_nanogpt_architecture(h.config);
                    std::map<std::string, Tensor> tensors;
                    for (const auto& [name, value] : weights) tensors[py::str(name)] = from_numpy(value, Want::floating, "weights['" + std::string(py::str(name)) + "']");
                    load_nanogpt(*h.model, tensors);
                    return h;
                  },
                  py::arg("weights"), py::arg("config"), py::arg("overrides") = std::vector<std::string>{},
                  "a causal LM of `config` (its sizes nanoGPT's) with weights given under nanoGPT's names ({name: array}, e.g. from "
                  "torch.load(ckpt)['model'] converted with .numpy()); framework/models/gpt_weights.hpp lists the names")
      .def("state_dict",
           [](const ModelHandle& h) {
             std::map<std::string, Tensor> weights;
             for (const auto& [name, t] : h.model->state_dict()) weights[name] = t.detach();
             return arrays_of(weights);
           },
           "the weights as {name: array} (views: copy before changing them), named as `attnlab export` names them")
      .def("to_nanogpt", [](const ModelHandle& h) {
             check_nanogpt_architecture(h.config);
             return arrays_of(to_nanogpt(*h.model));
           },
           "a causal LM's weights under nanoGPT's names (lm_head.weight the same array as wte's when tied)")
      .def("load_state_dict",
           [](ModelHandle& h, const py::dict& weights) {
             const std::map<std::string, Tensor> own = h.model->state_dict();
             std::map<std::string, Tensor> tensors;
             bool generators = false;
             for (const auto& [name, value] : weights) {
               const std::string key = py::str(name);
               const auto it = own.find(key);
               const bool integers = it != own.end() && it->second.dtype() == DType::int64;  // generator states
               generators = generators || integers;
               tensors[key] = from_numpy(value, integers ? Want::integers : Want::floating, "weights['" + key + "']");
             }
             // An export's weights (np.load of its .npy files) hold no generator states: they keep theirs.
             if (generators) h.model->load_state_dict(tensors);
             else h.model->load_weights(tensors);
           },
           py::arg("weights"),
           "sets every weight from {name: array}, state_dict()'s or an `attnlab export`'s (which has no generator states: the "
           "model keeps its own); a missing, unexpected or mis-shaped one is a ValueError naming it");
}

void bind_model_class(py::module_& m) {
  py::class_<ModelHandle> model(m, "Model", "a model with the data of its config; forwards in eval mode, without a graph");
  bind_detect_heads(model);
  bind_generate(model);
  bind_weights(model);
  model
      .def_static("from_config", [](const py::object& c, const std::vector<std::string>& o) { return model_from_config(config_from(c, o)); },
                  py::arg("config"), py::arg("overrides") = std::vector<std::string>{},
                  "a new model (initial weights from model.init_from's folder when it names one, else from the config's seed) from a YAML file's path or a dict, with key=value overrides")
      .def_static("from_run", &model_from_run, py::arg("run"), py::arg("checkpoint") = "best", "a run's model with its checkpoint's weights")
      .def_property_readonly("config", [](const ModelHandle& h) { return to_python(YAML::Load(config_to_yaml(h.config))); })
      .def_property_readonly("data", [](const ModelHandle& h) { return h.data; })
      .def_property_readonly("n_layers", [](const ModelHandle& h) { return h.model->n_layers(); })
      .def_property_readonly("n_heads", [](const ModelHandle& h) { return h.model->n_heads(); })
      .def("__call__",
           [](ModelHandle& h, const py::object& input, const py::object& pm, const py::object& di, const py::object& dpm) {
             Tensor logits;
             forward(h, batch_of(h, input, pm, di, dpm), {}, logits);
             return to_numpy(logits);
           },
           py::arg("input"), py::arg("padding_mask") = py::none(), py::arg("decoder_input") = py::none(),
           py::arg("decoder_padding_mask") = py::none(), "the logits: [B, T, V] per token, [B, K] per sequence")
      .def("run_with_cache",
           [](ModelHandle& h, const py::object& input, const std::vector<std::string>& names, const py::object& pm, const py::object& di,
              const py::object& dpm) {
             Tensor logits;
             HookRequest r;
             r.cache = names;
             const auto cache = forward(h, batch_of(h, input, pm, di, dpm), r, logits);
             return py::make_tuple(to_numpy(logits), arrays_of(cache));
           },
           py::arg("input"), py::arg("names") = std::vector<std::string>{"*"}, py::arg("padding_mask") = py::none(),
           py::arg("decoder_input") = py::none(), py::arg("decoder_padding_mask") = py::none(),
           "(logits, {name: array}) with the activations named (patterns with '*'; all by default); KeyError for a name no point has")
      .def("run_with_hooks",
           [](ModelHandle& h, const py::object& input, const std::vector<std::pair<std::string, py::object>>& hooks, const py::object& pm,
              const py::object& di, const py::object& dpm) {
             Tensor logits;
             HookRequest r;
             for (const auto& [name, fn] : hooks) r.replace.emplace_back(name, python_hook(fn));
             forward(h, batch_of(h, input, pm, di, dpm), r, logits);
             return to_numpy(logits);
           },
           py::arg("input"), py::arg("fwd_hooks"), py::arg("padding_mask") = py::none(), py::arg("decoder_input") = py::none(),
           py::arg("decoder_padding_mask") = py::none(),
           "the logits with each named activation replaced by fn(activation, name) (None: as fn left it); [(name or pattern, fn), ...]");
}

void bind_data_class(py::module_& m) {
  py::class_<data::DataSource, std::shared_ptr<data::DataSource>>(m, "Data", "the data of a config: held-out batches, token names, patching pairs")
      .def("held_out", [](const data::DataSource& d, std::int64_t size_arg, std::uint64_t seed) {
             // An empty batch has no sequence length to give its arrays (they came out (0, 0)).
             const std::size_t size = checked_examples(size_arg, "held_out", "size");
             Generator gen(seed);
             return batch_dict(d.sample(data::TaskSplit::held_out, size, gen));
           },
           py::arg("size"), py::arg("seed") = 0, "a batch of held-out examples as {input, target, padding_mask, ...} arrays")
      .def("token_name", [](const data::DataSource& d, std::int64_t id, std::size_t position) { return token_name(d, id, position); },
           py::arg("id"), py::arg("position") = 0, "how the token id reads (at `position`, for data whose names depend on it)")
      .def("to_string", [](const data::DataSource& d, const std::vector<std::int64_t>& ids) {
             std::string text;
             for (std::size_t i = 0; i < ids.size(); ++i) text += (i ? " " : "") + token_name(d, ids[i], i);
             return text;
           },
           py::arg("ids"), "the ids' names, space-separated")
      .def("to_tokens", [](const data::DataSource& d, const std::string& text, bool source) { return source ? d.encode_source(text) : d.token_ids(text); },
           py::arg("text"), py::arg("source") = false,
           "the ids of tokens written by their names (the inverse of to_string); source=True reads a seq2seq source as "
           "`attnlab translate --input` does, refusing tokens a source cannot hold")
      .def("patching_pairs", [](const data::DataSource& d, std::int64_t count_arg, std::uint64_t seed) {
             // No pairs at all reads as a task without them (empty entries), so none asked for is refused.
             const std::size_t count = checked_examples(count_arg, "patching_pairs", "count");
             Generator gen(seed);
             const PatchingPairs p = d.patching_pairs(count, gen);
             py::dict out;
             out["clean"] = batch_dict(p.clean), out["corrupted"] = batch_dict(p.corrupted);
             out["position"] = p.position, out["clean_answer"] = p.clean_answer, out["corrupted_answer"] = p.corrupted_answer;
             out["corruption"] = p.corruption;
             return out;
           },
           py::arg("count"), py::arg("seed") = 0, "the clean/corrupted pairs `attnlab analyze` patches with ({} entries empty when the task has none)")
      .def_property_readonly("vocab_size", [](const data::DataSource& d) { return d.shape().vocab_size; })
      .def_property_readonly("vocabulary", [](const data::DataSource& d) { return d.token_names(); },
           "every token id's name, by id (toy tasks: pad, sep, then their symbols; SCAN: its words; char_text: its bytes, \\xNN for a byte of a longer character)")
      .def_property_readonly("token_inputs", &data::DataSource::token_inputs);
}

}  // namespace

ExperimentConfig config_from(const py::object& config, const std::vector<std::string>& overrides) {
  if (py::isinstance<py::dict>(config)) {
    YAML::Emitter out;
    out << to_yaml(config, "config");
    return parse_config(out.c_str(), "<config dict>", overrides);
  }
  const std::string path = py::str(config);
  if (!std::filesystem::is_regular_file(path)) throw FileMissing(path + " is not a config file (give a YAML file's path or a dict)");
  return load_config(path, overrides);
}

std::size_t checked_count(std::int64_t value, const std::string& who, const std::string& name) {
  if (value < 0) throw py::value_error(who + ": " + name + " must be 0 or more; got " + std::to_string(value));
  return static_cast<std::size_t>(value);
}

std::size_t checked_examples(std::int64_t value, const std::string& who, const std::string& name) {
  if (value < 1 || value > static_cast<std::int64_t>(kMaxExamples)) {
    throw py::value_error(who + ": " + name + " must be in [1, " + std::to_string(kMaxExamples) + "]; got " + std::to_string(value));
  }
  return static_cast<std::size_t>(value);
}

int checked_threads(int threads, const std::string& who) {
  if (threads < 0 || threads > kMaxThreads) {
    throw py::value_error(who + ": threads must be in [0, " + std::to_string(kMaxThreads) + "] (0: every core this process may use); got " +
                          std::to_string(threads));
  }
  return threads;
}

ModelHandle model_from_config(const ExperimentConfig& config) {
  Experiment x(config);
  load_init_from(x);
  x.model->eval();  // for good: its forwards then write nothing of it, and Python threads may run them at once
  return ModelHandle{config, std::shared_ptr<data::DataSource>(std::move(x.data)), x.model};
}

ModelHandle model_from_run(const std::string& run_dir, const std::string& checkpoint) {
  if (!std::filesystem::is_directory(run_dir)) throw FileMissing(run_dir + " is not a folder; give a run folder (log.dir/name)");
  const LoadedRun run = load_run(run_dir, checkpoint);
  ModelHandle h = model_from_config(run.config);
  load_run_model(*h.model, run, h.data.get());
  return h;
}

void bind_models(py::module_& m) {
  bind_data_class(m);
  bind_model_class(m);
}

}  // namespace attnlab::python
