// Learning-rate schedules: warmup + cosine (nanoGPT's), warmup + linear, constant with and without
// warmup, driving an optimizer's lr, and their option checks.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/optim/schedule.hpp"
#include "tests/optim/optim_testing.hpp"

namespace attnlab::optim_testing {
namespace {

ScheduleOptions decaying(ScheduleKind kind) {
  ScheduleOptions o;
  o.kind = kind;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.decay_steps = 110;
  return o;
}

TEST(Schedule, WarmupCosineFollowsNanoGpt) {
  const LrSchedule s(decaying(ScheduleKind::warmup_cosine));
  const double pi = std::acos(-1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0 / 11);     // (it + 1) / (warmup + 1)
  EXPECT_DOUBLE_EQ(s.lr_at(4), 5.0 / 11);     // mid-warmup
  EXPECT_DOUBLE_EQ(s.lr_at(9), 10.0 / 11);    // last warmup step
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);         // end of warmup: the peak
  EXPECT_DOUBLE_EQ(s.lr_at(35), 0.1 + 0.5 * (1 + std::cos(pi * 0.25)) * 0.9);
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-15);      // half way: half way between lr and min_lr
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.1);        // end
  EXPECT_DOUBLE_EQ(s.lr_at(100000), 0.1);     // after the end
}

TEST(Schedule, WarmupLinear) {
  const LrSchedule s(decaying(ScheduleKind::warmup_linear));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0 / 11);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 5.0 / 11);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_NEAR(s.lr_at(35), 0.1 + 0.75 * 0.9, 1e-15);
  EXPECT_NEAR(s.lr_at(109), 0.1 + 0.01 * 0.9, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(5000), 0.1);
}

TEST(Schedule, ConstantWithAndWithoutWarmup) {
  ScheduleOptions o;
  o.lr = 3e-4;
  const LrSchedule flat(o);
  EXPECT_EQ(flat.lr_at(0), 3e-4);
  EXPECT_EQ(flat.lr_at(1000000), 3e-4);
  o.warmup_steps = 4;
  const LrSchedule warm(o);
  EXPECT_DOUBLE_EQ(warm.lr_at(0), 3e-4 / 5);
  EXPECT_DOUBLE_EQ(warm.lr_at(2), 3e-4 * 3 / 5);
  EXPECT_EQ(warm.lr_at(4), 3e-4);
  EXPECT_EQ(warm.lr_at(99), 3e-4);
}

TEST(Schedule, WarmupEndingWhereDecayEnds) {
  ScheduleOptions o = decaying(ScheduleKind::warmup_cosine);
  o.decay_steps = o.warmup_steps;
  const LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 10.0 / 11);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.1);
}

TEST(Schedule, DrivesTheOptimizersLr) {
  Tensor w = leaf({1.0});
  SGD sgd({{"w", w, ParamKind::weight}});
  const LrSchedule s(decaying(ScheduleKind::warmup_cosine));
  for (std::size_t it = 0; it < 200; ++it) {
    sgd.set_lr(s.lr_at(sgd.step_count()));
    set_grad(w, {0.0});
    sgd.step();
  }
  EXPECT_DOUBLE_EQ(sgd.lr(), 0.1);
}

TEST(Schedule, OptionsAreChecked) {
  auto make = [](ScheduleOptions o) { return [o] { LrSchedule s(o); }; };
  ScheduleOptions o = decaying(ScheduleKind::warmup_cosine);
  o.warmup_steps = 200;
  expect_error(make(o), "warmup_steps (200) must be <= decay_steps (110)");
  o = decaying(ScheduleKind::warmup_linear);
  o.min_lr = 2.0;
  expect_error(make(o), "min_lr must be in [0, lr] = [0, 1], got 2");
  o = decaying(ScheduleKind::warmup_cosine);
  o.lr = 0.0;
  expect_error(make(o), "lr must be a finite number > 0, got 0");
  o = decaying(ScheduleKind::warmup_cosine);
  o.decay_steps = 0;
  o.warmup_steps = 0;
  expect_error(make(o), "decay_steps must be > 0");
  o = ScheduleOptions();
  o.decay_steps = 100;
  expect_error(make(o), "a constant schedule does not decay");
  EXPECT_EQ(parse_schedule_kind("warmup_cosine"), ScheduleKind::warmup_cosine);
  expect_error([] { parse_schedule_kind("cosine"); },
               "lr schedule 'cosine' is not among [constant, warmup_cosine, warmup_linear]");
}

}  // namespace
}  // namespace attnlab::optim_testing
