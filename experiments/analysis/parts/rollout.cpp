// Attention rollout maps of a model that reads images: where the classifier looked in each of the first
// held-out images (rollout.hpp holds the method), as PNGs beside the tables and rollout_maps.npy.
#include <cstdio>
#include <optional>

#include "experiments/analysis/part.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

}  // namespace

void rollout_maps(const AnalysisInputs& in, const RolloutOptions& options, const std::string& dir, AnalysisResult& out) {
  const std::optional<Model::Patches> patches = in.model.patches();
  if (!patches || in.batches.empty()) return;
  EvalScope scope(in.model);
  const Batch& b = in.batches[0];
  ForwardOptions o;
  o.hooks.cache = in.model.attention_parts()[0].pattern_hooks;
  const ModelOutput run = in.model.forward(b, o);
  const std::size_t images = std::min<std::size_t>(8, b.input.size(0));
  std::vector<Tensor> maps;
  for (std::size_t p = 0; p < images; ++p) {
    std::vector<Tensor> layers;
    for (const std::string& hook : o.hooks.cache) {
      const auto it = run.cache.find(hook);
      if (it == run.cache.end() || !it->second.defined()) {
        out.notes.push_back("rollout: the kernel has no pattern");
        return;
      }
      const Tensor one = slice(it->second, 0, static_cast<I>(p), static_cast<I>(p) + 1);
      layers.push_back(squeeze(one, 0));
    }
    const Tensor map = rollout_map(attention_rollout(layers, options, patches->class_token), patches->class_token);
    const Tensor image = slice(b.input, 0, static_cast<I>(p), static_cast<I>(p) + 1);
    const std::string file = "rollout_probe_" + std::to_string(p) + ".png";
    write_rollout_png(dir + "/" + file, squeeze(image, 0), map);
    out.images.push_back(file);
    maps.push_back(unsqueeze(map, 0));
  }
  write_npy(dir + "/rollout_maps.npy", concat(maps, 0));
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%g", options.discard_ratio);
  out.notes.push_back(std::string("rollout: head fusion ") + head_fusion_name(options.head_fusion) + ", discard ratio " + ratio + ", the first " +
                      std::to_string(images) + " held-out images");
}

namespace {

class RolloutPart {
 public:
  static constexpr const char* kName = "rollout";
  static constexpr const char* kDescription = "attention rollout maps of the first held-out images (a model that reads images)";
  static constexpr const char* kTitle = "Attention rollout";
  static constexpr int kOrder = 50;
  struct Options {
    HeadFusion head_fusion = HeadFusion::mean;
    double discard_ratio = 0.0;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.choice("head_fusion", &Options::head_fusion, head_fusion_names(), "how a layer's heads are fused");
    s.field("discard_ratio", &Options::discard_ratio, "the share of each layer's weakest weights dropped", Range::closed_open(0, 1));
    return s;
  }
  static std::string needs(const Model& model, const data::DataSource&) {
    return model.patches() ? "" : "image inputs (it follows attention back to the patches of an image); this run reads tokens";
  }
  static void run(const PartInputs& p, const Options& o) { rollout_maps(p.in, RolloutOptions{o.head_fusion, o.discard_ratio}, p.folder, p.result); }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(RolloutPart);

}  // namespace attnlab
