// Circuits read from the weights alone (Elhage et al. 2021, "A Mathematical Framework for Transformer
// Circuits"): how much each head's output is read by a later head's queries, keys or values (the Q-, K-
// and V-composition scores, as TransformerLens's all_composition_scores), and what each head's OV
// circuit does to the tokens it moves (the copying score). docs/analysis.md gives the definitions.
#include <cctype>
#include <cmath>
#include <complex>
#include <map>
#include <optional>
#include <cstdio>
#include <stdexcept>

#include "experiments/analysis/part.hpp"

extern "C" void dgeev_(const char* jobvl, const char* jobvr, const int* n, double* a, const int* lda, double* wr, double* wi, double* vl,
                       const int* ldvl, double* vr, const int* ldvr, double* work, const int* lwork, int* info);

namespace attnlab {
namespace {

// A row-major matrix of doubles: the few products a circuit needs, at the sizes of these models.
struct Mat {
  std::size_t rows = 0, cols = 0;
  std::vector<double> v;
  Mat(std::size_t r, std::size_t c) : rows(r), cols(c), v(r * c, 0.0) {}
  double& at(std::size_t r, std::size_t c) { return v[r * cols + c]; }
  double at(std::size_t r, std::size_t c) const { return v[r * cols + c]; }
};

Mat operator*(const Mat& a, const Mat& b) {
  Mat out(a.rows, b.cols);
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t k = 0; k < a.cols; ++k) {
      const double x = a.at(i, k);
      for (std::size_t j = 0; j < b.cols; ++j) out.v[i * b.cols + j] += x * b.v[k * b.cols + j];
    }
  return out;
}

Mat transpose(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < a.cols; ++j) t.at(j, i) = a.at(i, j);
  return t;
}

double frobenius(const Mat& a) {
  double s = 0;
  for (double x : a.v) s += x * x;
  return std::sqrt(s);
}

// TransformerLens's composition score: |left right|_F / (|left|_F |right|_F).
double composition(const Mat& left, const Mat& right) { return frobenius(left * right) / (frobenius(left) * frobenius(right)); }

// The eigenvalues of a square matrix (LAPACK's dgeev, from OpenBLAS).
std::vector<std::complex<double>> eigenvalues(Mat a) {
  const int n = static_cast<int>(a.rows), one = 1;
  std::vector<double> re(a.rows), im(a.rows), work(8 * a.rows + 8);
  const int lwork = static_cast<int>(work.size());
  int info = 0;
  double unused = 0;
  dgeev_("N", "N", &n, a.v.data(), &n, re.data(), im.data(), &unused, &one, &unused, &one, work.data(), &lwork, &info);
  if (info != 0) throw std::runtime_error("dgeev failed (info " + std::to_string(info) + ") on a " + std::to_string(n) + "x" + std::to_string(n) + " matrix");
  std::vector<std::complex<double>> out;
  for (std::size_t i = 0; i < a.rows; ++i) out.emplace_back(re[i], im[i]);
  return out;
}

// A 2-D weight of the model's state_dict as a Mat, found by the end of its name (the hook prefix of its
// block, "decoder.blocks.0.", then the module: "attn.qkv.weight"); empty when there is none.
std::optional<Mat> weight(const std::map<std::string, Tensor>& state, const std::string& suffix) {
  for (const auto& [name, t] : state) {
    const bool ends = name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                      (name.size() == suffix.size() || name[name.size() - suffix.size() - 1] == '.');
    if (!ends || t.dim() > 2) continue;
    Mat m(t.size(0), t.dim() == 2 ? t.size(1) : 1);
    m.v = t.to_vector();
    return m;
  }
  return std::nullopt;
}

// A diagonal gain (a LayerNorm's weight) applied to the rows of w: diag(g) w.
Mat scale_rows(Mat w, const std::optional<Mat>& gain) {
  if (!gain) return w;
  for (std::size_t i = 0; i < w.rows; ++i)
    for (std::size_t j = 0; j < w.cols; ++j) w.at(i, j) *= gain->v[i];
  return w;
}

// One head's circuits in TransformerLens's convention (x a row vector): W_Q, W_K, W_V [C, D] read the
// residual stream (after the block's norm gain, folded in), W_O [D, C] writes it.
struct Head {
  Mat q, k, v, o;
  Mat ov() const { return v * o; }
  Mat qk() const { return q * transpose(k); }
};

// The heads of the layer at hook prefix `block` ("blocks.1."), or nothing when its attention has no fused
// qkv and output projection.
std::vector<Head> layer_heads(const std::map<std::string, Tensor>& state, const std::string& block, std::size_t heads, bool pre_norm) {
  const std::optional<Mat> qkv = weight(state, block + "attn.qkv.weight"), proj = weight(state, block + "attn.proj.weight");
  if (!qkv || !proj) return {};
  const std::size_t c = proj->rows, d = c / heads;
  const std::optional<Mat> gain = pre_norm ? weight(state, block + "norm1.weight") : std::nullopt;
  std::vector<Head> out;
  for (std::size_t h = 0; h < heads; ++h) {
    Head head{Mat(c, d), Mat(c, d), Mat(c, d), Mat(d, c)};
    for (std::size_t i = 0; i < d; ++i)
      for (std::size_t x = 0; x < c; ++x) {
        head.q.at(x, i) = qkv->at(h * d + i, x);
        head.k.at(x, i) = qkv->at(c + h * d + i, x);
        head.v.at(x, i) = qkv->at(2 * c + h * d + i, x);
        head.o.at(i, x) = proj->at(x, h * d + i);
      }
    head.q = scale_rows(head.q, gain), head.k = scale_rows(head.k, gain), head.v = scale_rows(head.v, gain);
    out.push_back(head);
  }
  return out;
}

// The composition tables of one stack: senders (every head of the layers before the last) down,
// receivers (every head after the first layer) across; NaN where the receiver is not in a later layer.
void composition_tables(const PartBlocks& part, const std::vector<std::vector<Head>>& layers, std::size_t heads, AnalysisResult& out) {
  std::vector<std::string> senders, receivers;
  for (std::size_t l = 0; l + 1 < layers.size(); ++l)
    for (std::size_t h = 0; h < heads; ++h) senders.push_back(std::to_string(l) + "." + std::to_string(h));
  for (std::size_t l = 1; l < layers.size(); ++l)
    for (std::size_t h = 0; h < heads; ++h) receivers.push_back(std::to_string(l) + "." + std::to_string(h));
  const char* modes[] = {"q", "k", "v"};
  const char* reads[] = {"queries", "keys", "values"};
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<double> values;
    for (std::size_t s = 0; s < senders.size(); ++s) {
      const std::size_t sl = s / heads;
      const Mat ov = layers[sl][s % heads].ov();
      for (std::size_t r = 0; r < receivers.size(); ++r) {
        const std::size_t rl = 1 + r / heads;
        if (rl <= sl) {
          values.push_back(NAN);
          continue;
        }
        const Head& receiver = layers[rl][r % heads];
        const Mat right = mode == 0 ? receiver.qk() : mode == 1 ? transpose(receiver.qk()) : receiver.ov();
        values.push_back(composition(ov, right));
      }
    }
    out.add({"circuits_" + part_prefix(part.part) + "composition_" + modes[mode], "circuits",
             std::string(1, static_cast<char>(std::toupper(modes[mode][0]))) + "-composition: how much each later head's " + reads[mode] +
                 " read what each earlier head writes (|W_OV W|/(|W_OV| |W|), from the weights)" + part_title(part.part),
             "sender", "receiver", senders, receivers, values, false, mode == 1, 0});
    out.facts["circuits." + part_prefix(part.part) + "composition_" + modes[mode] + ".max"] = finite_extreme(values, true);
  }
}

// The mean composition score of random Gaussian weights of the same shapes: what no structure gives.
double random_composition(std::size_t c, std::size_t d, std::uint64_t seed) {
  Generator gen(seed);
  const auto random = [&](std::size_t r, std::size_t k) {
    Mat m(r, k);
    for (double& x : m.v) x = gen.next_normal();
    return m;
  };
  double total = 0;
  const int draws = 16;
  for (int i = 0; i < draws; ++i) total += composition(random(c, d) * random(d, c), random(c, d) * transpose(random(c, d)));
  return total / draws;
}

// Each head's copying score: the eigenvalues λ of its full OV circuit W_E W_OV W_U (the token embedding,
// through the head, to the logits; the norm gains folded in), as Σ Re λ / Σ |λ|: 1 for a head that
// raises the logit of the token it attends to, -1 for one that lowers it. W_E W_OV W_U is [V, V] of rank
// at most D; its non-zero eigenvalues are those of the [D, D] W_O W_U W_E W_V.
void copying_table(const Model& model, const std::map<std::string, Tensor>& state, const std::vector<std::vector<Head>>& layers,
                   std::size_t heads, AnalysisResult& out) {
  const std::optional<Mat> embed = weight(state, "tok.weight"), head = weight(state, "head.weight");
  if (!model.predicts_next_token() || !embed || !head || embed->rows != head->rows) return;
  const std::optional<Mat> final_gain = model.final_norm() ? weight(state, "final_norm.weight") : std::nullopt;
  const Mat unembed = scale_rows(transpose(*head), final_gain);  // [C, V]
  const Mat through = unembed * *embed;                          // W_U W_E [C, C]
  std::vector<double> values;
  for (const std::vector<Head>& layer : layers)
    for (const Head& h : layer) {
      double signed_sum = 0, magnitude = 0;
      for (const std::complex<double>& l : eigenvalues(h.o * through * h.v)) signed_sum += l.real(), magnitude += std::abs(l);
      values.push_back(magnitude > 0 ? signed_sum / magnitude : NAN);
    }
  out.add({"circuits_copying", "circuits", "Copying score of each head's OV circuit: sum of the eigenvalues of W_E W_OV W_U over the sum of their magnitudes",
           "layer", "head", numbered(layers.size()), numbered(heads), values, true, true, 0});
}

// Each head's QK circuit on the direct path from the embeddings (a causal LM's first layer reads nothing
// else): the share of tokens whose query scores its own token's key highest (W_E QK W_E^T: a
// duplicate-token head), and, with positions in the stream (a position table), the share of query
// positions i >= 1 whose highest-scored key among j <= i is i - 1 (P QK P^T: a previous-token head).
void qk_tables(const Model& model, const std::map<std::string, Tensor>& state, const std::vector<std::vector<Head>>& layers, std::size_t heads,
               AnalysisResult& out) {
  const std::optional<Mat> embed = weight(state, "tok.weight"), positions = weight(state, "pos.table");
  if (!model.predicts_next_token() || !embed) return;
  std::vector<double> same, previous;
  for (const std::vector<Head>& layer : layers)
    for (const Head& h : layer) {
      const Mat qk = h.qk();
      const Mat tokens = *embed * qk * transpose(*embed);  // [V, V]
      double hits = 0;
      for (std::size_t v = 0; v < tokens.rows; ++v) {
        std::size_t best = 0;
        for (std::size_t u = 1; u < tokens.cols; ++u)
          if (tokens.at(v, u) > tokens.at(v, best)) best = u;
        hits += best == v;
      }
      same.push_back(hits / static_cast<double>(tokens.rows));
      if (!positions) continue;
      const Mat p = *positions * qk * transpose(*positions);  // [T, T]
      double prev = 0;
      for (std::size_t i = 1; i < p.rows; ++i) {
        std::size_t best = 0;
        for (std::size_t j = 1; j <= i; ++j)
          if (p.at(i, j) > p.at(i, best)) best = j;
        prev += best + 1 == i;
      }
      previous.push_back(p.rows > 1 ? prev / static_cast<double>(p.rows - 1) : NAN);
    }
  out.add({"circuits_qk_same_token", "circuits",
           "QK circuit from the token embedding: share of tokens whose query scores its own token highest (direct path)", "layer", "head",
           numbered(layers.size()), numbered(heads), same, false, false, 0});
  if (positions) {
    out.add({"circuits_qk_previous_position", "circuits",
             "QK circuit from the position table: share of positions whose query scores the previous position highest (direct path)", "layer",
             "head", numbered(layers.size()), numbered(heads), previous, false, false, 0});
  }
}

}  // namespace

void weight_circuits(const Model& model, AnalysisResult& out) {
  const std::map<std::string, Tensor> state = model.state_dict();
  const std::size_t heads = model.n_heads();
  const bool pre_norm = model.final_norm() != nullptr;  // pre-norm stacks end with a final norm; a block's norm1 feeds its attention
  bool any = false;
  for (const PartBlocks& part : part_blocks(model)) {
    if (part.attention != "attn") continue;  // cross-attention reads the encoder's stream: no composition within a stack
    std::vector<std::vector<Head>> layers;
    for (const std::string& block : part.blocks) layers.push_back(layer_heads(state, block, heads, pre_norm));
    if (layers.empty() || layers[0].empty()) continue;
    if (layers.size() >= 2) composition_tables(part, layers, heads, out), any = true;
    if (part.part.empty()) {  // a single stack from tokens to next-token logits
      copying_table(model, state, layers, heads, out);
      qk_tables(model, state, layers, heads, out);
    }
    if (!out.facts.count("circuits.composition_baseline")) {
      out.facts["circuits.composition_baseline"] = random_composition(layers[0][0].o.cols, layers[0][0].o.rows, 17);
    }
  }
  if (!any) out.notes.push_back("circuits: composition needs two layers or more; this model has one");
}

namespace {

class CircuitsPart {
 public:
  static constexpr const char* kName = "circuits";
  static constexpr const char* kDescription =
      "from the weights alone: Q-, K- and V-composition between heads of different layers, and each head's OV copying score";
  static constexpr const char* kTitle = "Circuits in the weights: composition between heads, copying";
  static constexpr int kOrder = 35;
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static void run(const PartInputs& p, const Options&) { weight_circuits(p.in.model, p.result); }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(CircuitsPart);

}  // namespace attnlab
