#include "experiments/runner/train.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "experiments/runner/data_parallel.hpp"
#include "experiments/runner/evaluation.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/memory_estimate.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/process_stats.hpp"
#include "experiments/runner/progress.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/run_folder.hpp"
#include "experiments/runner/stop_signals.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/npy.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

// One training session: a new run, or a run resumed from its last.ckpt. Under mpirun every rank runs
// one, each on its rows of the global batch (data_parallel.hpp); rank 0 alone writes the run folder and
// prints, holding the run folder's lock (run_folder.hpp) for the session's life.
class Trainer {
 public:
  // `x`: what the config builds (start_experiment); `lock`: rank 0's lock on the resumed run's folder (a
  // new run's is taken when its folder is made).
  Trainer(Experiment x, const std::optional<LoadedRun>& resumed, std::optional<RunFolderLock> lock);
  TrainResult run();

 private:
  struct StepLoss {
    double loss;  // the global batch's mean loss
    bool stop;    // a stop signal reached this rank, or under mpirun any rank, before the allreduce
  };
  bool writer() const { return parallel_.comm().rank() == 0; }
  bool due(std::size_t step, std::size_t every) const { return step == c_.train.steps || (every && step % every == 0); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  double rate() const { return static_cast<double>(tokens_) / std::max(seconds(), 1e-9); }
  StepLoss forward_backward(const StopSignals& stop);
  void log_train(std::size_t step, double lr);
  void evaluate_at(std::size_t step, double lr, const std::function<bool()>& stop);
  bool after_step(std::size_t step, const StopSignals& stop);  // true: a stop ended its evaluation
  void save(const std::string& file);
  void write_row(const MetricRow& row);
  RunSummary summary(const std::string& status);
  TrainResult diverged(std::size_t step, double loss, double lr);
  TrainResult stopped(const StopSignals& stop);
  // Under mpirun, waits for every rank before a stopped or diverged run returns: mpirun kills the whole
  // job as soon as one rank exits after a signal, or exits non-zero, so a rank that left early would cut
  // rank 0's checkpoint, summary and message short.
  void leave_together() const { parallel_.comm().barrier(); }
  TrainResult finish();

  const ExperimentConfig c_;
  Experiment x_;
  DataParallel parallel_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  std::optional<RunFolderLock> lock_;  // rank 0's
  std::optional<RunFolder> folder_;    // rank 0's
  std::string run_dir_;
  TrainState state_;
  Generator data_gen_;
  std::optional<MetricsLog> log_;    // rank 0's
  Progress progress_;
  std::optional<Probes> probes_;
  Evaluation last_eval_;
  std::size_t first_step_, tokens_ = 0;  // tokens read in this session (by every rank together)
  std::chrono::steady_clock::time_point start_;
  TrainResult result_;
};

// The model's starting weights: from the checkpoint when resuming, else model.init_from's folder, if any
// (read by rank 0, whose model state every rank then receives: DataParallel).
Experiment build(const ExperimentConfig& c, const std::optional<LoadedRun>& resumed) {
  Experiment x(c);
  if (resumed) {
    load_run_model(*x.model, *resumed, x.data.get());
  } else if (dist::Communicator::world().rank() == 0) {
    load_init_from(x);
  }
  return x;
}

// The global batch's split checked, then what the config builds. Under mpirun every rank does this
// alike and learns whether it failed on any, so that an error every rank meets is printed once
// (Communicator::agree).
Experiment start_experiment(const ExperimentConfig& c, const std::optional<LoadedRun>& resumed) {
  const dist::Communicator& world = dist::Communicator::world();
  std::optional<Experiment> built;
  world.agree([&] {
    check_even_split(c.train.batch_size, "train.batch_size", world, resumed.has_value());  // a resumed run keeps its batch
    built.emplace(build(c, resumed));
  });
  return std::move(*built);
}

// The run folder (rank 0's only): created once everything else is known to work, and locked, or the
// resumed one (already locked) made ready again.
std::optional<RunFolder> folder_for(const ExperimentConfig& c, const std::optional<LoadedRun>& resumed, std::optional<RunFolderLock>& lock) {
  if (dist::Communicator::world().rank() != 0) return std::nullopt;
  if (!resumed) {
    RunFolder folder = RunFolder::create(c);
    lock.emplace(folder.dir(), "attnlab train");
    return folder;
  }
  RunFolder folder = RunFolder::open(resumed->dir);  // clears what a kill left
  folder.write_config(c);  // with the new overrides (train.steps), or restored from the checkpoint
  std::remove(folder.path("summary.json").c_str());  // unfinished again until the new last step
  return folder;
}

Trainer::Trainer(Experiment x, const std::optional<LoadedRun>& resumed, std::optional<RunFolderLock> lock)
    : c_(x.config),
      x_(std::move(x)),
      parallel_(dist::Communicator::world(), *x_.model),
      optimizer_(make_optimizer(c_.train.optimizer, *x_.model)),
      schedule_(make_schedule(c_.train)),
      lock_(std::move(lock)),
      folder_(folder_for(c_, resumed, lock_)),
      run_dir_(folder_ ? folder_->dir() : ""),
      state_(resumed ? resumed->state : TrainState{}),
      data_gen_(c_.seed + 1),
      progress_(c_.train.steps, !parallel_.active() ? ProgressOutput::automatic : writer() ? ProgressOutput::lines : ProgressOutput::none),
      first_step_(state_.step + 1) {
  parallel_.comm().broadcast(run_dir_);  // rank 0 chose it (name-2 when name was taken)
  if (writer()) {
    log_.emplace(run_dir_, resumed ? std::optional<std::size_t>(resumed->state.step) : std::nullopt, resumed && resumed->state.evaluation_owed);
  }
  if (resumed) {
    optimizer_->load_state_dict(checkpoint_part(resumed->checkpoint, "optim."));
    data_gen_.set_state(state_.data_rng);
  }
  // Fixed probes from the held-out split, captured only at capture steps (never in the hot path).
  if (captures_patterns(c_)) {
    probes_ = make_probes(*x_.data, c_.log.probes, c_.seed + 3, *x_.model);
  }
  result_.run_dir = run_dir_;
  const std::size_t ranks = static_cast<std::size_t>(parallel_.comm().size());
  const std::string processes = parallel_.active() ? " on " + std::to_string(ranks) + " processes (data parallel, " +
                                                         std::to_string(c_.train.batch_size / ranks) + " sequences each)"
                                                   : "";
  progress_.message("attnlab: " + std::string(resumed ? "resuming " : "training ") + c_.name + " (" +
                    std::to_string(x_.model->parameter_count()) + " parameters) " + (resumed ? "at" : "from") + " step " +
                    std::to_string(first_step_) + " to " + std::to_string(c_.train.steps) + processes + "; run folder " + run_dir_);
}

TrainResult Trainer::run() {
  start_ = std::chrono::steady_clock::now();
  StopSignals stop;
  const std::vector<Tensor> parameters = x_.model->parameters();
  SharingTuner tuner;  // whether the steps share their work with the other threads, measured (parallel.hpp)
  if (state_.evaluation_owed && after_step(state_.step, stop)) return stopped(stop);  // the stopped run's owed evaluation first
  for (std::size_t step = first_step_; step <= c_.train.steps; ++step) {
    const double lr = schedule_.lr_at(step - 1);
    optimizer_->set_lr(lr);
    tuner.begin_step();
    const StepLoss step_loss = forward_backward(stop);
    const double value = step_loss.loss;
    const double norm = clip_grad_norm(parameters, c_.train.grad_clip > 0 ? c_.train.grad_clip : INFINITY);  // of the summed gradient
    if (!std::isfinite(value) || !std::isfinite(norm)) return diverged(step, value, lr);
    optimizer_->step();
    optimizer_->zero_grad();  // free the gradients now: the next forward runs without them
    tuner.end_step();
    if (!tuner.change().empty()) progress_.message("attnlab: " + tuner.change(), true);
    state_.step = step;
    state_.running_loss += value;
    ++state_.running_count;
    result_.final_train_loss = value;
    const double eta = seconds() / static_cast<double>(step - first_step_ + 1) * static_cast<double>(c_.train.steps - step);
    progress_.step(step, value, rate(), eta);
    if (due(step, c_.log.interval)) log_train(step, lr);
    const bool evaluation_stopped = after_step(step, stop);
    test_stop_point("step:" + std::to_string(step));
    // Under mpirun the ranks agree through the allreduce: every rank stops after the same step.
    const bool stopping = evaluation_stopped || (parallel_.active() ? step_loss.stop : stop.requested());
    if (stopping && step < c_.train.steps) return stopped(stop);
  }
  TrainResult result = finish();
  // A stop during the last step's evaluations did not end them: they finish the run (a run at its last
  // step is not resumed). Said, so that the signal is not taken as lost.
  if (stop.requested() && writer()) {
    std::fprintf(stderr, "attnlab: %s came during the last step, whose evaluations finish the run; it has finished (exit 0)\n", stop.name());
  }
  return result;
}

// What follows a step: its evaluations, pattern capture and checkpoints, each when due. Ctrl-C or
// SIGTERM that comes during an evaluation before the last step ends it (nothing of it is logged or saved,
// the patterns are not captured), marks it owed (TrainState::evaluation_owed: a resume runs this first)
// and returns true: the run stops after this step, its checkpoints written as at any step. A signal from
// before the evaluation lets it run, and stops the run after it, as before; the last step's evaluations
// finish the run (a run at its last step is not resumed). Under mpirun the ranks agree on stopping only
// through a step's allreduce, so an evaluation there runs to its end.
bool Trainer::after_step(std::size_t step, const StopSignals& stop) {
  bool evaluation_stopped = false;
  state_.evaluation_owed = false;  // best.ckpt, saved inside the evaluation, is of a step whose evaluation ran
  if (due(step, c_.train.eval_interval)) {
    const bool signalled_before = stop.requested();
    const auto stops = [&] {
      test_stop_point("eval:" + std::to_string(step));
      return step < c_.train.steps && !parallel_.active() && !signalled_before && stop.requested();
    };
    try {
      evaluate_at(step, schedule_.lr_at(step - 1), stops);
    } catch (const EvaluationStopped&) {
      evaluation_stopped = true;
    }
  }
  state_.evaluation_owed = evaluation_stopped;  // for the checkpoints below and the one stopped() writes
  if (probes_ && writer() && !evaluation_stopped && due(step, c_.log.pattern_interval ? c_.log.pattern_interval : c_.train.eval_interval)) {
    log_->write(capture_patterns(*x_.model, *probes_, step, run_dir_));
  }
  if (due(step, c_.train.checkpoint_interval)) {
    save("last.ckpt");
    if (c_.train.keep_checkpoints && writer()) {
      std::filesystem::create_directories(run_dir_ + "/checkpoints");
      save("checkpoints/step_" + std::to_string(step) + ".ckpt");
    }
  }
  return evaluation_stopped;
}

// Draws the global batch, and takes the gradient of this rank's rows (all of them in a single process).
// Under mpirun each rank's mean loss is weighted by its share of the batch's scored targets, so that the
// allreduce's sum is the gradient of the global batch's mean loss, which it also returns.
Trainer::StepLoss Trainer::forward_backward(const StopSignals& stop) {
  const Batch whole = x_.data->sample(data::TaskSplit::train, c_.train.batch_size, data_gen_);
  const Batch batch = parallel_.shard(whole);
  Tensor loss = cross_entropy(x_.model->forward(batch).logits, batch.target, data::kIgnore, c_.train.label_smoothing);
  if (parallel_.active()) loss = mul(loss, parallel_.loss_weight(whole, batch));
  loss.backward();
  tokens_ += x_.model->tokens_read(whole);
  const std::vector<double> sums = parallel_.reduce({loss.item(), stop.requested() ? 1.0 : 0.0});
  return {sums[0], sums[1] > 0};
}

void Trainer::log_train(std::size_t step, double lr) {
  MetricRow row;
  row.step = step, row.split = "train", row.lr = lr, row.tokens_per_s = rate(), row.elapsed_s = state_.train_seconds + seconds();
  row.loss = state_.running_loss / static_cast<double>(state_.running_count);
  write_row(row);
  const double eta = seconds() / static_cast<double>(step - first_step_ + 1) * static_cast<double>(c_.train.steps - step);
  progress_.log_line(step, row.loss, lr, row.tokens_per_s, eta, parallel_.progress());
  state_.running_loss = 0;
  state_.running_count = 0;
}

// A periodic evaluation on the same held-out batches every time; best.ckpt follows its loss. Both
// evaluations (with train.eval_train) finish before anything is logged or saved: one that `stop` ends
// leaves no trace, and is run whole again (after_step).
void Trainer::evaluate_at(std::size_t step, double lr, const std::function<bool()>& stop) {
  const Evaluation held_out = evaluate(*x_.model, *x_.data, c_.train.eval_batches, c_.train.batch_size, c_.seed + 2, parallel_.comm(), stop);
  std::optional<Evaluation> train;
  if (c_.train.eval_train) train = evaluate_train(*x_.model, *x_.data, c_.train.eval_batches, c_.train.batch_size, c_.seed + 8, parallel_.comm(), stop);
  last_eval_ = held_out;
  if (last_eval_.loss < state_.best_eval) {
    state_.best_eval = last_eval_.loss;
    save("best.ckpt");
  }
  MetricRow row;
  row.step = step, row.split = "eval", row.loss = last_eval_.loss, row.token_accuracy = last_eval_.metrics.token_accuracy;
  row.exact_match = last_eval_.metrics.exact_match, row.lr = lr, row.tokens_per_s = rate();
  row.elapsed_s = state_.train_seconds + seconds();
  write_row(row);
  progress_.evaluation(step, row.loss, row.token_accuracy, row.exact_match);
  if (!train) return;
  row.split = "eval_train", row.loss = train->loss, row.token_accuracy = train->metrics.token_accuracy, row.exact_match = train->metrics.exact_match;
  write_row(row);
}

// Rank 0 writes; the other ranks hold the same state.
void Trainer::write_row(const MetricRow& row) {
  if (log_) log_->write(row);
}

// Rank 0 writes; the other ranks hold the same state.
void Trainer::save(const std::string& file) {
  if (!folder_) return;
  TrainState s = state_;
  s.train_seconds += seconds();
  s.data_rng = data_gen_.state();
  folder_->save_checkpoint(file, c_, *x_.model, *optimizer_, s, *x_.data);
}

// The run's report.html; a failure to write it is reported and does not fail the run. Whether it was written.
bool write_report(const std::string& run_dir) {
  try {
    write_run_report(run_dir);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: warning: report.html not written: %s\n", e.what());
    return false;
  }
}

// What every summary.json says; the peak memory is rank 0's.
RunSummary Trainer::summary(const std::string& status) {
  RunSummary s;
  s.name = c_.name, s.status = status, s.steps = state_.step, s.params = x_.model->parameter_count();
  s.state_size = state_size(c_);
  s.openblas_core = blas_core_name(), s.cpu_vendor = cpu_vendor(), s.compiler = compiler_name();
  s.train_seconds = state_.train_seconds + seconds(), s.tokens_per_s = rate(), s.peak_rss_mb = peak_rss_mb();
  s.best_eval_loss = state_.best_eval;
  parallel_.fill(s, seconds());
  return s;
}

// Stops before the step: the parameters are still those of the last step, and last.ckpt keeps them.
TrainResult Trainer::diverged(std::size_t step, double loss, double lr) {
  std::string culprit;
  for (const auto& p : x_.model->named_parameters()) {
    const Tensor g = p.tensor.grad();
    if (!g.defined() || culprit.size()) continue;
    for (double v : g.to_vector())
      if (!std::isfinite(v)) {
        culprit = p.name;
        break;
      }
  }
  optimizer_->zero_grad();
  MetricRow row;
  row.step = step, row.split = "diverged", row.loss = loss, row.lr = lr, row.elapsed_s = state_.train_seconds + seconds();
  write_row(row);
  save("last.ckpt");
  if (writer()) {
    write_summary(run_dir_, summary("diverged"));
    write_report(run_dir_);
  }
  progress_.final_message("attnlab: training stopped at step " + std::to_string(step) + ": the loss is " + (std::isnan(loss) ? std::string("NaN") : std::to_string(loss)) +
                    (culprit.empty() ? "" : " and the gradient of " + culprit + " is not finite") + "; last.ckpt holds step " +
                    std::to_string(state_.step) + ", the state before it. Lower train.optimizer.lr or set train.grad_clip");
  result_.diverged = true;
  leave_together();
  return result_;
}

// Under mpirun a rank may stop because another received the signal: it stops as if sent SIGTERM.
TrainResult Trainer::stopped(const StopSignals& stop) {
  save("last.ckpt");
  if (writer()) write_report(run_dir_);
  const bool signalled = stop.requested();
  const std::string launcher = parallel_.active() ? "mpirun -np " + std::to_string(parallel_.comm().size()) + " " : "";
  progress_.final_message("attnlab: stopped by " + std::string(signalled ? stop.name() : "SIGTERM (sent to another rank)") + " after step " +
                    std::to_string(state_.step) + "; checkpoint written. Resume with: " + launcher + "attnlab train --resume " + run_dir_);
  result_.stop_signal = signalled ? stop.signal() : SIGTERM;
  leave_together();
  return result_;
}

// The figure to report: final_eval_batches held-out batches, or the whole split when 0 (the last periodic
// evaluation again when they agree); logged as split "final". best.ckpt is chosen by the periodic
// evaluations alone, which all see the same batches.
TrainResult Trainer::finish() {
  const double lr = schedule_.lr_at(c_.train.steps - 1);
  const Evaluation e = c_.train.final_eval_batches == c_.train.eval_batches
                           ? last_eval_
                           : evaluate(*x_.model, *x_.data, c_.train.final_eval_batches, c_.train.batch_size, c_.seed + 2, parallel_.comm());
  MetricRow row;
  row.step = c_.train.steps, row.split = "final", row.loss = e.loss, row.token_accuracy = e.metrics.token_accuracy;
  row.exact_match = e.metrics.exact_match, row.lr = lr, row.tokens_per_s = rate(), row.elapsed_s = state_.train_seconds + seconds();
  write_row(row);
  char line[256];
  std::snprintf(line, sizeof line, "final evaluation (%s, %zu scored tokens): loss %.4f  token accuracy %.2f%%  exact match %.2f%%",
                c_.train.final_eval_batches ? "sampled batches" : "the whole held-out split", e.metrics.scored_tokens, e.loss,
                100 * e.metrics.token_accuracy, 100 * e.metrics.exact_match);
  progress_.message(line, true);
  result_.final_eval_loss = e.loss, result_.final_token_accuracy = e.metrics.token_accuracy;
  result_.final_exact_match = e.metrics.exact_match, result_.final_scored_tokens = e.metrics.scored_tokens;
  RunSummary s = summary("finished");
  s.final_eval_loss = e.loss, s.final_token_accuracy = e.metrics.token_accuracy;
  s.final_exact_match = e.metrics.exact_match, s.final_scored_tokens = e.metrics.scored_tokens;
  bool reported = false;
  if (writer()) {
    write_summary(run_dir_, s);  // marks the run finished (attnlab compare reads it)
    reported = write_report(run_dir_);
  }
  std::snprintf(line, sizeof line, "attnlab: done in %.1fs; results in %s%s", seconds(), run_dir_.c_str(), reported ? " (report.html)" : "");
  progress_.message(line);
  return result_;
}

}  // namespace

TrainResult train_experiment(const ExperimentConfig& config, int threads) {
  set_num_threads(threads);
  return Trainer(start_experiment(config, std::nullopt), std::nullopt, std::nullopt).run();
}

// Under mpirun rank 0 locks the run folder, loads the run and sends its resolved config and last.ckpt's
// bytes to the others, which need no access to the run folder.
TrainResult resume_experiment(const std::string& run_dir, const std::vector<std::string>& overrides, int threads) {
  set_num_threads(threads);
  const dist::Communicator& comm = dist::Communicator::world();
  std::optional<RunFolderLock> lock;
  std::optional<LoadedRun> run;
  std::string config_yaml, checkpoint;
  // Rank 0 reads the run; a run it refuses (an override that changes the model, a run at its last step)
  // ends every rank alike, said once, rather than through MPI_Abort.
  comm.agree([&] {
    if (comm.rank() != 0) return;
    lock.emplace(RunFolder::open(run_dir).dir(), "attnlab train");  // before reading: no other writer is mid-checkpoint
    run = load_run(run_dir, "last", overrides);
    if (run->state.step >= run->config.train.steps) {
      throw std::invalid_argument("the run in " + run_dir + " is already at step " + std::to_string(run->state.step) +
                                  "; to train further set train.steps above it (attnlab train --resume " + run_dir + " train.steps=N)");
    }
    check_resumable_metrics(run_dir, run->state.step, run->state.evaluation_owed);  // before its config and summary change
    if (comm.distributed()) config_yaml = config_to_yaml(run->config), checkpoint = read_file(run_dir + "/last.ckpt", "checkpoint");
  });
  comm.broadcast(config_yaml);
  comm.broadcast(checkpoint);
  if (comm.rank() != 0) run = loaded_run_from(run_dir, config_yaml, checkpoint);
  return Trainer(start_experiment(run->config, run), run, std::move(lock)).run();
}

}  // namespace attnlab
