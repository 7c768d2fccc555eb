#include "framework/autograd/gradcheck.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "framework/autograd/node.hpp"
#include "framework/tensor/random.hpp"

namespace attnlab {
namespace {

// L = sum(y * u), evaluated without recording a graph.
double weighted_sum(const Tensor& y, const std::vector<double>& u) {
  const std::vector<double> values = y.to_vector();
  double total = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) total += values[i] * u[i];
  return total;
}

std::vector<std::size_t> unravel(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t i = shape.size(); i-- > 0;) {
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  return index;
}

}  // namespace

std::string GradcheckResult::report() const {
  std::ostringstream os;
  os.precision(10);
  for (const auto& r : inputs) {
    os << "input " << r.input << ": " << (r.ok ? "ok" : "MISMATCH") << ", worst element " << shape_str(r.index)
       << " analytic " << r.analytic << " numeric " << r.numeric << "\n";
  }
  return os.str();
}

GradcheckResult gradcheck(const GradcheckFunction& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<std::size_t> checked;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    if (t.dtype() != DType::float64) {
      throw std::invalid_argument("gradcheck: input " + std::to_string(i) + " is " + dtype_name(t.dtype()) +
                                  "; finite differences need float64 (call .to(DType::float64) on inputs and "
                                  "parameters), or float32 rounding makes correct gradients look wrong");
    }
    if (!t.is_leaf()) throw std::invalid_argument("gradcheck: input " + std::to_string(i) + " must be a leaf tensor");
    checked.push_back(i);
  }
  if (checked.empty()) throw std::invalid_argument("gradcheck: no input requires grad, so there is nothing to check");

  // Keep the callers' gradients; the check accumulates into fresh ones.
  std::vector<Tensor> saved_grads;
  for (std::size_t i : checked) {
    saved_grads.push_back(inputs[i].grad());
    const_cast<Tensor&>(inputs[i]).zero_grad();
  }

  Tensor y = f(inputs);
  if (y.dtype() != DType::float64) throw std::invalid_argument("gradcheck: the function's output must be float64");
  Generator gen(options.seed);
  std::vector<double> u(y.numel());
  for (double& v : u) v = 0.5 + gen.next_double();  // in [0.5, 1.5): non-uniform, never zero
  if (y.requires_grad()) y.backward(from_vector(u, y.shape(), DType::float64));

  GradcheckResult result;
  for (std::size_t c = 0; c < checked.size(); ++c) {
    Tensor x = inputs[checked[c]];
    const Tensor g = x.grad();
    const std::vector<double> analytic = g.defined() ? g.to_vector() : std::vector<double>(x.numel(), 0.0);
    GradcheckInputReport report;
    report.input = checked[c];
    report.excess = -INFINITY;
    double* data = x.data<double>();
    for (std::size_t e = 0; e < x.numel(); ++e) {
      const double original = data[e];
      double plus, minus;
      {
        NoGradGuard no_grad;
        data[e] = original + options.eps;
        plus = weighted_sum(f(inputs), u);
        data[e] = original - options.eps;
        minus = weighted_sum(f(inputs), u);
        data[e] = original;
      }
      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double excess = std::fabs(analytic[e] - numeric) - (options.atol + options.rtol * std::fabs(numeric));
      if (excess > report.excess || std::isnan(analytic[e]) || std::isnan(numeric)) {
        report.excess = std::isnan(excess) ? INFINITY : excess;
        report.index = unravel(e, x.shape());
        report.analytic = analytic[e];
        report.numeric = numeric;
      }
    }
    report.ok = report.excess <= 0.0;
    result.ok = result.ok && report.ok;
    result.inputs.push_back(report);
  }
  for (std::size_t c = 0; c < checked.size(); ++c) const_cast<Tensor&>(inputs[checked[c]]).set_grad(saved_grads[c]);
  return result;
}

}  // namespace attnlab
