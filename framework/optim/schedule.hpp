// Learning-rate schedules: the lr for a step number, which the training loop hands to
// Optimizer::set_lr before each step.
//
//   constant        lr, after an optional linear warmup
//   warmup_cosine   linear warmup, cosine decay to min_lr at decay_steps, min_lr after (nanoGPT's get_lr)
//   warmup_linear   linear warmup, linear decay to min_lr at decay_steps, min_lr after
//
// Warmup, as nanoGPT: lr * (step + 1) / (warmup_steps + 1) for step < warmup_steps, so the first step
// already moves and step warmup_steps reaches lr. Decay runs over [warmup_steps, decay_steps]:
// ratio = (step - warmup_steps) / (decay_steps - warmup_steps), and
//   cosine: min_lr + 0.5 (1 + cos(pi ratio)) (lr - min_lr);   linear: min_lr + (1 - ratio) (lr - min_lr).
#pragma once

#include <cstddef>
#include <string>

#include "framework/tensor/enum_names.hpp"

namespace attnlab {

enum class ScheduleKind { constant, warmup_cosine, warmup_linear };
const EnumNames<ScheduleKind>& schedule_kind_names();
const char* schedule_kind_name(ScheduleKind kind);
// "constant", "warmup_cosine" or "warmup_linear" (for configs); other names are an error listing these.
ScheduleKind parse_schedule_kind(const std::string& name);

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::constant;
  double lr = 1e-3;              // the peak lr, > 0
  std::size_t warmup_steps = 0;  // steps of linear warmup (0: start at lr)
  std::size_t decay_steps = 0;   // the step at which the decay reaches min_lr (nanoGPT's lr_decay_iters);
                                 // >= warmup_steps and > 0 for the decaying kinds, 0 for constant
  double min_lr = 0.0;           // in [0, lr]; the floor of the decaying kinds (unused by constant)
};

// Checks the options; throws OptionError naming the key ("min_lr") and the fix.
void check_schedule(const ScheduleOptions& options);

class LrSchedule {
 public:
  // Checks the options; errors name the field and the fix.
  explicit LrSchedule(const ScheduleOptions& options);
  double lr_at(std::size_t step) const;
  const ScheduleOptions& options() const { return options_; }

 private:
  ScheduleOptions options_;
};

}  // namespace attnlab
