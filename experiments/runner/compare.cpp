#include "experiments/runner/compare.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <thread>

#include "experiments/runner/analysis_summary.hpp"
#include "experiments/runner/compare_plan.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/stop_signals.hpp"
#include "framework/io/atomic_file.hpp"

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

// Starts `attnlab train ...` (or `attnlab analyze RUN`) for a run, its output appended to
// runs/<variant>/seed_<s>.log.
pid_t spawn_run(const Job& job, int threads) {
  const PlannedRun& p = *job.run;
  std::vector<std::string> args = {"attnlab", job.analyze ? "analyze" : "train"};
  if (job.analyze) {
    args.push_back(p.run_dir);
  } else if (fs::exists(p.run_dir + "/last.ckpt")) {
    args.insert(args.end(), {"--resume", p.run_dir});
  } else {
    if (fs::exists(p.run_dir)) fs::remove_all(p.run_dir);  // started but never reached a checkpoint: start again
    args.push_back(p.config_file);
  }
  args.insert(args.end(), {"--threads", std::to_string(threads)});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = p.log_file();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error) throw std::runtime_error(std::string("cannot start ") + (job.analyze ? "an analysis" : "a training") + " process for " + p.rel + ": " +
                                      std::strerror(error));
  return pid;
}

// The runs in flight, started `jobs` at a time.
class RunPool {
 public:
  RunPool(const CompareSpec& spec, std::size_t planned, int jobs, int threads) : spec_(spec), planned_(planned), jobs_(jobs), threads_(threads) {}
  void start(const std::vector<Job>& queue, std::size_t& next) {
    while (next < queue.size() && static_cast<int>(running_.size()) < jobs_) {
      const Job job = queue[next++];
      const pid_t pid = spawn_run(job, threads_);
      running_[pid] = {job, std::chrono::steady_clock::now()};
      std::printf("  %s %s (log: %s.log)\n", job.analyze ? "analysing" : "started  ", job.run->rel.c_str(), job.run->rel.c_str());
      std::fflush(stdout);
    }
  }
  bool empty() const { return running_.empty(); }
  // Forwards a stop signal: each run writes its last.ckpt after its current step and stops.
  void stop_all(int signal) {
    for (const auto& [pid, run] : running_) kill(pid, signal);
  }
  // Waits for one run to end and reports it; false when the wait was interrupted by a signal.
  bool reap(std::size_t& done, std::vector<std::string>& failed, bool stopping, std::vector<Job>& queue);

 private:
  struct Running {
    Job job;
    std::chrono::steady_clock::time_point started;
  };
  const CompareSpec& spec_;
  std::size_t planned_;
  int jobs_, threads_;
  std::map<pid_t, Running> running_;
};

bool RunPool::reap(std::size_t& done, std::vector<std::string>& failed, bool stopping, std::vector<Job>& queue) {
  int status = 0;
  const pid_t pid = waitpid(-1, &status, 0);
  if (pid < 0) {
    if (errno == EINTR) return false;
    throw std::runtime_error(std::string("waiting for a training process: ") + std::strerror(errno));
  }
  const auto it = running_.find(pid);
  if (it == running_.end()) return true;
  const Job job = it->second.job;
  const PlannedRun* p = job.run;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.started).count();
  running_.erase(it);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string state = run_status(*p);
  if (job.analyze) {
    if (code == 0) std::printf("  analysed %s in %.1f s\n", p->rel.c_str(), seconds);
    else if (!stopping) failed.push_back(p->rel + " (analysis)"), std::printf("  FAILED   analysis of %s (exit %d); see %s.log\n", p->rel.c_str(), code, p->rel.c_str());
  } else if (state == "finished") {
    ++done;
    const double value = read_run(p->run_dir).final_value(spec_.metric);
    std::printf("  finished %s in %.1f s: %s %s  [%zu/%zu]\n", p->rel.c_str(), seconds, spec_.metric.c_str(),
                std::isnan(value) ? "-" : std::to_string(value).c_str(), done, planned_);
    if (needs_analysis(spec_, *p) && !stopping) queue.push_back({p, true});
  } else if (state == "diverged") {
    failed.push_back(p->rel);
    std::printf("  DIVERGED %s (its loss went non-finite; see %s.log)\n", p->rel.c_str(), p->rel.c_str());
  } else if (code == 130 || code == 143 || stopping) {
    std::printf("  stopped  %s (it continues from its last.ckpt when resumed)\n", p->rel.c_str());
  } else {
    failed.push_back(p->rel);
    std::printf("  FAILED   %s (exit %d); see %s.log\n", p->rel.c_str(), code, p->rel.c_str());
  }
  std::fflush(stdout);
  return true;
}

std::string command_line(const std::string& config_path, const CompareOptions& options) {
  std::string command = "attnlab compare " + config_path;
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
    if (!fs::exists(p.config_file)) write_file_atomically(p.config_file, p.config_yaml);
  }
}

}  // namespace

std::size_t check_comparison(const std::string& config_path) { return plan_comparison(read_compare_spec(config_path), {}, false).size(); }

int run_comparison(const std::string& config_path, const CompareOptions& options) {
  const CompareSpec spec = read_compare_spec(config_path);
  const std::vector<PlannedRun> plan = plan_comparison(spec, options.overrides, true);  // every run validated before anything is written
  prepare_folder(spec, plan, config_path, options);
  std::vector<Job> queue;
  for (const PlannedRun& p : plan)
    if (needs_running(p)) queue.push_back({&p, false});
  const std::size_t training = queue.size();
  for (const PlannedRun& p : plan)
    if (needs_analysis(spec, p)) queue.push_back({&p, true});  // finished earlier, not yet analysed
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int jobs = std::max(1, options.jobs), threads = options.threads > 0 ? options.threads : std::max(1, cores / jobs);
  const std::string grid = spec.grid.empty() ? "" : " x " + std::to_string(spec.points().size()) + " grid points";
  std::printf("attnlab compare: %s, %zu variant%s%s x %zu seed%s; %zu of %zu runs already done; %d at a time, %d thread%s each\n",
              spec.folder().c_str(), spec.variants.size(), spec.variants.size() == 1 ? "" : "s", grid.c_str(), spec.seeds.size(),
              spec.seeds.size() == 1 ? "" : "s", plan.size() - training, plan.size(), jobs, threads, threads == 1 ? "" : "s");
  std::fflush(stdout);
  StopSignals stop(false);  // no restart: a signal wakes the wait below
  RunPool pool(spec, plan.size(), jobs, threads);
  std::vector<std::string> failed;
  std::size_t next = 0, done = plan.size() - training;
  bool forwarded = false;
  while (next < queue.size() || !pool.empty()) {
    if (!stop.requested()) pool.start(queue, next);
    if (pool.empty()) break;
    if (!pool.reap(done, failed, stop.requested(), queue) && stop.requested() && !forwarded) {
      pool.stop_all(stop.signal());
      forwarded = true;
    }
  }
  write_comparison_summary(spec, plan);
  std::printf("attnlab compare: %zu of %zu runs done; %s/summary.md, %s/report.html\n", done, plan.size(), spec.folder().c_str(),
              spec.folder().c_str());
  if (stop.requested()) {
    std::printf("attnlab compare: stopped by %s. Resume with the same command: %s\n", stop.name(), command_line(config_path, options).c_str());
    return stop.exit_status();
  }
  if (!failed.empty()) {
    std::fprintf(stderr, "attnlab compare: %zu run%s failed:", failed.size(), failed.size() == 1 ? "" : "s");
    for (const auto& f : failed) std::fprintf(stderr, " %s", f.c_str());
    std::fprintf(stderr, " (their .log files say why; the same command retries those that did not diverge)\n");
    return 1;
  }
  return 0;
}

}  // namespace attnlab
