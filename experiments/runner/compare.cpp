#include "experiments/runner/compare.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>

#include "experiments/runner/analysis_summary.hpp"
#include "experiments/runner/compare_plan.hpp"
#include "experiments/runner/compare_progress.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/run_folder.hpp"
#include "experiments/runner/stop_signals.hpp"
#include "framework/distributed/communicator.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/ops/parallel.hpp"

extern char** environ;

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// One job of a run: its training, or (analyze: true) its analysis once it has finished.
struct Job {
  const PlannedRun* run;
  bool analyze;
};

// Whether a finished run still needs `attnlab analyze` (a comparison with analyze: true).
bool needs_analysis(const CompareSpec& spec, const PlannedRun& p) {
  return spec.analyze && run_status(p) == "finished" && !has_analysis(p.run_dir);
}

// The environment of a run's process: this one's without the variables through which an MPI launcher
// makes a process a rank, so that a run started by a rank of `mpirun attnlab compare` is a plain
// single-process `attnlab train` (it would otherwise take itself for a rank of the job and initialise MPI);
// with this process's pid, so that the run ends when the comparison does (stop_signals.hpp).
const std::vector<std::string>& child_environment() {
  static const std::vector<std::string> variables = [] {
    std::vector<std::string> kept;
    for (char** e = environ; *e; ++e)
      if (!dist::is_launcher_variable(*e) && std::string(*e).rfind(std::string(kParentPidVariable) + "=", 0) != 0) kept.emplace_back(*e);
    kept.push_back(std::string(kParentPidVariable) + "=" + std::to_string(getpid()));
    return kept;
  }();
  return variables;
}

// Makes a training job's folder ready: one that never reached a checkpoint is removed, to start again.
// Returns "", or why the run cannot start now: another process writes its folder (a run of an earlier
// attempt still stopping, or a train started by hand), which is then left alone.
std::string prepare_run_folder(const PlannedRun& p) {
  if (!fs::exists(p.run_dir)) return "";
  try {
    const RunFolderLock lock(p.run_dir, "attnlab compare");
    if (!fs::exists(p.run_dir + "/last.ckpt")) fs::remove_all(p.run_dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Starts `attnlab train ...` (or `attnlab analyze RUN`) for a run, its output appended to
// runs/<variant>/seed_<s>.log.
std::string& run_program() {
  static std::string program = "/proc/self/exe";
  return program;
}

pid_t spawn_run(const Job& job, int threads) {
  const PlannedRun& p = *job.run;
  std::vector<std::string> args = {"attnlab", job.analyze ? "analyze" : "train"};
  if (job.analyze) {
    args.push_back(p.run_dir);
  } else if (fs::exists(p.run_dir + "/last.ckpt")) {
    args.insert(args.end(), {"--resume", p.run_dir});
  } else {
    args.push_back(p.config_file);
  }
  args.insert(args.end(), {"--threads", std::to_string(threads)});
  std::vector<char*> argv, env;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (const std::string& e : child_environment()) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  const std::string log = p.log_file();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  // The run starts with the stop signals blocked: one forwarded before its handler is in place waits for
  // it (stop_signals.hpp) instead of killing the run before it can write a checkpoint.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  const sigset_t stop = stop_signal_set();
  sigorset(&mask, &mask, &stop);
  posix_spawnattr_setsigmask(&attributes, &mask);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, run_program().c_str(), &actions, &attributes, argv.data(), env.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (error) throw std::runtime_error(std::string("cannot start ") + (job.analyze ? "an analysis" : "a training") + " process for " + p.rel + ": " +
                                      std::strerror(error));
  return pid;
}

// The runs in flight, started `jobs` at a time.
class RunPool {
 public:
  // `tag` starts each line (which rank's runs they are, under mpirun).
  RunPool(const CompareSpec& spec, const std::vector<Job>& queue, std::size_t planned, int jobs, int threads, std::string tag)
      : spec_(spec), planned_(planned), jobs_(jobs), threads_(threads), tag_(std::move(tag)), progress_(tag_.empty()) {
    for (const Job& job : queue)
      if (!job.analyze) progress_.add(*job.run);
  }
  // Starts jobs until `jobs` run; a run whose folder another process writes is counted into `failed`.
  void start(const std::vector<Job>& queue, std::size_t& next, std::vector<std::string>& failed) {
    while (next < queue.size() && static_cast<int>(running_.size()) < jobs_) {
      const Job job = queue[next++];
      const std::string busy = job.analyze ? "" : prepare_run_folder(*job.run);
      if (!busy.empty()) {
        refuse(*job.run, busy, failed);
        continue;
      }
      const pid_t pid = spawn_run(job, threads_);
      running_[pid] = {job, std::chrono::steady_clock::now()};
      if (!job.analyze) progress_.started(*job.run);
      say(std::string(job.analyze ? "analysing" : "started  ") + " " + shown(*job.run) + " (log: " + shown(*job.run) + ".log)");
      test_stop_point("start:" + std::to_string(++started_));  // right after it started its Nth job
    }
  }
  bool empty() const { return running_.empty(); }
  // Forwards a stop signal: each run writes its last.ckpt after its current step and stops.
  void stop_all(int signal) {
    for (const auto& [pid, run] : running_) kill(pid, signal);
  }
  // Reports a run that cannot start, here and in its .log.
  void refuse(const PlannedRun& p, const std::string& why, std::vector<std::string>& failed) {
    failed.push_back(p.rel);
    say("FAILED   " + shown(p) + ": " + why);
    std::ofstream(p.log_file(), std::ios::app) << "attnlab compare: not started: " << why << "\n";
  }
  // Waits a moment for a run to end and reports it (nothing when none ended in that time or a signal
  // cut the wait short: the caller looks at the stop flag and comes back).
  void reap(std::size_t& done, std::vector<std::string>& failed, bool stopping, std::vector<Job>& queue);
  // Between waits: the status line of the runs under way (compare_progress.hpp).
  void tick() { progress_.tick(); }

 private:
  // A run's folder as a path from where the command runs.
  std::string shown(const PlannedRun& p) const { return (fs::path(spec_.folder()) / p.rel).lexically_normal().string(); }
  void say(const std::string& text) { progress_.say("  " + tag_ + text); }
  struct Running {
    Job job;
    std::chrono::steady_clock::time_point started;
  };
  const CompareSpec& spec_;
  std::size_t planned_;
  int jobs_, threads_;
  std::string tag_;
  std::map<pid_t, Running> running_;
  std::size_t started_ = 0, reported_ = 0;  // jobs started and ended so far
  CompareProgress progress_;
};

void RunPool::reap(std::size_t& done, std::vector<std::string>& failed, bool stopping, std::vector<Job>& queue) {
  int status = 0;
  const pid_t pid = waitpid(-1, &status, WNOHANG);
  if (pid == 0) {
    // Nothing ended: sleep a moment (a signal cuts it short) and let the caller look at the stop flag
    // again. A blocking waitpid would miss a signal that came just before it: the runs would never hear
    // of it and train to the end.
    const timespec pause{0, 50'000'000};
    nanosleep(&pause, nullptr);
    return;
  }
  if (pid < 0) throw std::runtime_error(std::string("waiting for a training process: ") + std::strerror(errno));
  const auto it = running_.find(pid);
  if (it == running_.end()) return;
  const Job job = it->second.job;
  const PlannedRun* p = job.run;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.started).count();
  running_.erase(it);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string state = run_status(*p), where = shown(*p);
  if (!job.analyze) progress_.ended(*p);
  char took[32];
  std::snprintf(took, sizeof took, "%.1f s", seconds);
  if (job.analyze) {
    if (code == 0) say("analysed " + where + " in " + took);
    else if (!stopping)
      failed.push_back(p->rel + " (analysis)"), say("FAILED   analysis of " + where + " (exit " + std::to_string(code) + "); see " + where + ".log");
  } else if (state == "finished") {
    ++done;
    const double value = read_run(p->run_dir).final_value(spec_.metric);
    char shown_value[32];
    std::snprintf(shown_value, sizeof shown_value, spec_.metric == "loss" ? "%.4f" : "%.2f%%", spec_.metric == "loss" ? value : 100 * value);
    say("finished " + where + " in " + took + ": " + spec_.metric + " " + (std::isnan(value) ? "-" : shown_value) + "  [" +
        std::to_string(done) + "/" + std::to_string(planned_) + "]" + (done < planned_ ? "  " + progress_.eta() : ""));
    if (needs_analysis(spec_, *p) && !stopping) queue.push_back({p, true});
  } else if (state == "diverged") {
    failed.push_back(p->rel);
    say("DIVERGED " + where + " (its loss went non-finite; see " + where + ".log)");
  } else if (code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGUSR1 || stopping) {
    say("stopped  " + where + " (it continues from its last.ckpt when resumed)");
  } else {
    failed.push_back(p->rel);
    say("FAILED   " + where + " (exit " + std::to_string(code) + "); see " + where + ".log");
  }
  test_stop_point("report:" + std::to_string(++reported_));  // right after it reported the end of its Nth job
}

std::string command_line(const std::string& config_path, const CompareOptions& options) {
  const dist::Communicator& world = dist::Communicator::world();
  std::string command = (world.distributed() ? "mpirun -np " + std::to_string(world.size()) + " " : "") + "attnlab compare " + config_path;
  for (const auto& o : options.overrides) command += " " + o;
  return command;
}

// Creates the comparison folder: compare.yaml (the file as run) and each run's resolved config.
void prepare_folder(const CompareSpec& spec, const std::vector<PlannedRun>& plan, const std::string& config_path, const CompareOptions& options) {
  const std::string dir = spec.folder();
  create_folders(dir + "/runs", "the comparison's folder");
  std::string with;
  for (const auto& o : options.overrides) with += " " + o;
  write_file_atomically(dir + "/compare.yaml", "# " + config_path + (with.empty() ? "" : " with") + with + "\n" + spec.text);
  for (const PlannedRun& p : plan) {
    create_folders(fs::path(p.config_file).parent_path().string(), "a variant's folder");
    if (p.moved || !fs::exists(p.config_file)) write_file_atomically(p.config_file, p.config_yaml);
  }
}

// The comparison's jobs in order: every run that needs training, then the finished runs not yet
// analysed (analyze: true). Under mpirun rank 0 lists them, from the folder as it stands before any rank
// starts, and sends the list; each rank takes every size-th job from its rank on (round robin). Sets
// `training` to the training jobs of the whole list.
std::vector<Job> jobs_of(const CompareSpec& spec, const std::vector<PlannedRun>& plan, const std::vector<bool>& included,
                         const dist::Communicator& comm, std::size_t& training) {
  std::vector<std::uint32_t> order;  // plan index * 2, + 1 for an analysis
  if (comm.rank() == 0) {
    for (std::size_t i = 0; i < plan.size(); ++i)
      if (included[i] && needs_running(plan[i])) order.push_back(static_cast<std::uint32_t>(2 * i));
    for (std::size_t i = 0; i < plan.size(); ++i)
      if (included[i] && needs_analysis(spec, plan[i])) order.push_back(static_cast<std::uint32_t>(2 * i + 1));  // finished earlier, not yet analysed
  }
  std::string bytes(reinterpret_cast<const char*>(order.data()), order.size() * sizeof(std::uint32_t));
  comm.broadcast(bytes);
  order.resize(bytes.size() / sizeof(std::uint32_t));
  if (!bytes.empty()) std::memcpy(order.data(), bytes.data(), bytes.size());  // nothing to run: no copy (memcpy of null is undefined)
  training = static_cast<std::size_t>(std::count_if(order.begin(), order.end(), [](std::uint32_t o) { return o % 2 == 0; }));
  std::vector<Job> mine;
  for (std::size_t k = static_cast<std::size_t>(comm.rank()); k < order.size(); k += static_cast<std::size_t>(comm.size()))
    mine.push_back({&plan[order[k] / 2], order[k] % 2 == 1});
  return mine;
}

// The end of a comparison: under mpirun every rank waits for all (then rank 0 alone writes the summary
// and report, and the counts are the whole job's); the exit status every rank returns.
// `finished`: the runs this rank trained to the end; `already`: those finished before the comparison started.
int finish_comparison(const CompareSpec& spec, const std::vector<PlannedRun>& plan, std::size_t expected, std::size_t finished,
                      std::size_t already, const std::vector<std::string>& failed, const StopSignals& stop, const std::string& command) {
  const dist::Communicator& comm = dist::Communicator::world();
  const std::string tag = comm.distributed() ? "attnlab compare (" + comm.who() + ")" : "attnlab compare";
  if (!failed.empty()) {
    std::fprintf(stderr, "%s: %zu run%s failed:", tag.c_str(), failed.size(), failed.size() == 1 ? "" : "s");
    for (const auto& f : failed) std::fprintf(stderr, " %s", f.c_str());
    std::fprintf(stderr, " (their .log files say why; the same command retries those that did not diverge)\n");
  }
  comm.barrier();
  double totals[3] = {static_cast<double>(finished), static_cast<double>(failed.size()), stop.requested() ? 1.0 : 0.0};
  comm.sum(totals, 3);
  if (comm.rank() == 0) {
    write_comparison_summary(spec, plan);
    std::printf("attnlab compare: %.0f of %zu runs done; %s/summary.md, %s/report.html\n", static_cast<double>(already) + totals[0],
                expected, spec.folder().c_str(), spec.folder().c_str());
    if (totals[2] > 0) std::printf("attnlab compare: stopped by %s. Resume with the same command: %s\n", stop.requested() ? stop.name() : "SIGTERM", command.c_str());
    if (totals[1] > 0 && comm.distributed()) std::fprintf(stderr, "attnlab compare: %.0f runs failed (each named above by its rank)\n", totals[1]);
  }
  std::fflush(stdout);
  if (totals[2] > 0) return stop.requested() ? stop.exit_status() : 128 + SIGTERM;
  return totals[1] > 0 ? 1 : 0;
}

}  // namespace

std::size_t check_comparison(const std::string& config_path) { return plan_comparison(read_compare_spec(config_path), {}, false).size(); }

namespace {

// The runs a comparison trains: all of them, or with select.seeds the choosing seeds' runs at every
// value and the others' at the chosen values only (a value per variant and point of the other axes).
std::size_t expected_runs(const CompareSpec& spec, const std::vector<PlannedRun>& plan) {
  if (!spec.two_phase()) return plan.size();
  const std::size_t choosing = static_cast<std::size_t>(
      std::count_if(plan.begin(), plan.end(), [&](const PlannedRun& p) { return spec.choosing_seed(p.seed); }));
  return choosing + (plan.size() - choosing) / spec.grid[spec.select->axis].values.size();
}

// Runs the jobs of the planned runs that `included` marks, `jobs` at a time, until all ended or a stop
// signal came; counts finished runs into `done` and failed ones into `failed`.
void run_jobs(const CompareSpec& spec, const std::vector<PlannedRun>& plan, const std::vector<bool>& included, int jobs, int threads,
              std::size_t expected, StopSignals& stop, std::size_t& done, std::vector<std::string>& failed) {
  const dist::Communicator& comm = dist::Communicator::world();
  std::size_t training = 0;
  std::vector<Job> queue = jobs_of(spec, plan, included, comm, training);
  const std::string tag = comm.distributed() ? "[rank " + std::to_string(comm.rank()) + "] " : "";
  // The pool counts finished runs against the whole comparison, or under mpirun against this rank's share.
  RunPool pool(spec, queue, comm.distributed() ? queue.size() : expected, jobs, threads, tag);
  std::size_t next = 0;
  bool forwarded = false;
  while (next < queue.size() || !pool.empty()) {
    if (!stop.requested()) pool.start(queue, next, failed);
    if (pool.empty()) break;
    // Checked before every wait, so a signal that came while runs were being started or reported
    // (outside the wait) still reaches them.
    if (stop.requested() && !forwarded) {
      pool.stop_all(stop.signal());
      forwarded = true;
    }
    pool.tick();
    pool.reap(done, failed, stop.requested(), queue);
  }
}

}  // namespace

void set_run_program(const std::string& path) { run_program() = path; }

int run_comparison(const std::string& config_path, const CompareOptions& options) {
  const dist::Communicator& comm = dist::Communicator::world();
  // Rank 0 reads the file, validates every run and writes the folder before any other rank reads it: a
  // bad file stops the job with rank 0's one message, and nothing is written.
  std::optional<CompareSpec> spec;
  std::vector<PlannedRun> plan;
  const auto read = [&] { spec = read_compare_spec(config_path), plan = plan_comparison(*spec, options.overrides, true); };
  if (comm.rank() == 0) read(), prepare_folder(*spec, plan, config_path, options);
  comm.barrier();
  if (comm.rank() != 0) read();
  // The cores of this machine, divided among the runs at a time of every rank on it.
  const int jobs = std::max(1, options.jobs);
  const int threads = default_threads(options.threads, jobs * comm.local_size());
  const std::size_t expected = expected_runs(*spec, plan);
  const std::size_t already = static_cast<std::size_t>(
      std::count_if(plan.begin(), plan.end(), [](const PlannedRun& p) { return !needs_running(p); }));
  const std::string grid = spec->grid.empty() ? "" : " x " + std::to_string(spec->points().size()) + " grid points";
  const std::string ranks = comm.distributed() ? " over " + std::to_string(comm.size()) + " processes," : "";
  if (comm.rank() == 0)
    std::printf("attnlab compare: %s, %zu variant%s%s x %zu seed%s; %zu of %zu runs already done;%s %d at a time, %d thread%s each\n",
                spec->folder().c_str(), spec->variants.size(), spec->variants.size() == 1 ? "" : "s", grid.c_str(), spec->seeds.size(),
                spec->seeds.size() == 1 ? "" : "s", already, expected, ranks.c_str(), jobs, threads, threads == 1 ? "" : "s");
  std::fflush(stdout);
  StopSignals stop(false);  // no restart: a signal wakes the waits
  std::vector<std::string> failed;
  std::size_t done = comm.distributed() ? 0 : already;
  // With select.seeds, first the choosing seeds' runs at every value; then, once every rank's are done,
  // the other seeds' at the values chosen (rank 0 chooses: jobs_of sends its list).
  std::vector<bool> included(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) included[i] = spec->choosing_seed(plan[i].seed);
  run_jobs(*spec, plan, included, jobs, threads, expected, stop, done, failed);
  double stopping = stop.requested() ? 1.0 : 0.0;
  if (spec->two_phase()) {
    comm.barrier();              // waits (sleeping, not polling a core) until every rank's choosing runs are done
    comm.sum(&stopping, 1);      // was any rank stopped?
  }
  if (spec->two_phase() && stopping == 0) {
    const std::vector<bool> selected = comm.rank() == 0 ? selected_runs(*spec, plan) : std::vector<bool>(plan.size());
    for (std::size_t i = 0; i < plan.size(); ++i) included[i] = !spec->choosing_seed(plan[i].seed) && selected[i];
    run_jobs(*spec, plan, included, jobs, threads, expected, stop, done, failed);
  }
  return finish_comparison(*spec, plan, expected, done - (comm.distributed() ? 0 : already), already, failed, stop,
                           command_line(config_path, options));
}

}  // namespace attnlab
