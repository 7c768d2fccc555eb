#include "framework/optim/schedule.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "framework/tensor/option_error.hpp"

namespace attnlab {
namespace {

constexpr double pi = 3.14159265358979323846;

std::string number(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

}  // namespace

void check_schedule(const ScheduleOptions& o) {
  const std::string who = std::string("the ") + schedule_kind_name(o.kind) + " schedule: ";
  if (!(o.lr > 0.0) || !std::isfinite(o.lr)) throw OptionError("lr", who + "lr must be a finite number > 0, got " + number(o.lr));
  if (!(o.min_lr >= 0.0 && o.min_lr <= o.lr)) {
    throw OptionError("min_lr", who + "min_lr must be in [0, lr] = [0, " + number(o.lr) + "], got " + number(o.min_lr));
  }
  if (o.kind == ScheduleKind::constant) {
    if (o.decay_steps != 0) {
      throw OptionError("decay_steps", who + "a constant schedule does not decay, but decay_steps is " + std::to_string(o.decay_steps) +
                                           "; set it to 0 or use warmup_cosine or warmup_linear");
    }
    return;
  }
  if (o.decay_steps == 0) throw OptionError("decay_steps", who + "decay_steps must be > 0 (the step at which lr reaches min_lr)");
  if (o.warmup_steps > o.decay_steps) {
    throw OptionError("warmup_steps", who + "warmup_steps (" + std::to_string(o.warmup_steps) + ") must be <= decay_steps (" +
                                          std::to_string(o.decay_steps) + "); the decay starts where the warmup ends");
  }
}


const EnumNames<ScheduleKind>& schedule_kind_names() {
  static const EnumNames<ScheduleKind> names{{"constant", ScheduleKind::constant},
                                             {"warmup_cosine", ScheduleKind::warmup_cosine},
                                             {"warmup_linear", ScheduleKind::warmup_linear}};
  return names;
}

const char* schedule_kind_name(ScheduleKind kind) { return enum_name(schedule_kind_names(), kind); }

ScheduleKind parse_schedule_kind(const std::string& name) { return parse_enum(schedule_kind_names(), name, "lr schedule"); }

LrSchedule::LrSchedule(const ScheduleOptions& options) : options_(options) { check_schedule(options_); }

double LrSchedule::lr_at(std::size_t step) const {
  const ScheduleOptions& o = options_;
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps + 1);
  }
  if (o.kind == ScheduleKind::constant) return o.lr;
  if (step >= o.decay_steps) return o.min_lr;
  // Here warmup_steps <= step < decay_steps, so the span is at least 1.
  const double ratio = static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.decay_steps - o.warmup_steps);
  const double coefficient = o.kind == ScheduleKind::warmup_cosine ? 0.5 * (1.0 + std::cos(pi * ratio)) : 1.0 - ratio;
  return o.min_lr + coefficient * (o.lr - o.min_lr);
}

}  // namespace attnlab
