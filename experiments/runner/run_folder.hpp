// A run's folder: created under log.dir with a validated name, opened again to resume, evaluate, sample
// or export. config.yaml and the checkpoints are written through a temporary file and a rename, so a kill
// at any moment leaves the previous version whole. A checkpoint holds the model, the optimizer, where
// training stands (TrainState), and the config it was trained with; whoever loads a run compares that
// config with the folder's config.yaml, so an edited config can never silently build another model.
// A process that writes a run (training it) holds the folder's lock, RunFolderLock, for as long as it runs.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/runner/config.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/checkpoint.hpp"
#include "framework/optim/optimizer.hpp"

namespace attnlab {

// A folder that is not a run, or a file a run does not have (its checkpoint, its analysis).
class RunFileMissing : public FileMissing {
 public:
  using FileMissing::FileMissing;
};

// "" when `name` can name a run's folder (letters, digits, '_', '-', '.'; not "." or ".."; at most 200
// characters), else what is wrong with it.
std::string folder_name_problem(const std::string& name);

// A run folder's lock, held for the life of whatever writes the run (`attnlab train`, new or resumed): a
// second writer is refused at once, instead of two processes training one run into one folder (as a
// comparison run again while a run of its first attempt still trained once did). The lock is flock(2) on
// RUN/.lock, so the kernel releases it when the holder ends, however it ends (kill -9 included); the file
// holds the holder's pid and what it does, for the message. The file stays when the lock is released
// (emptied): removing it would let a process that opened it just before lock the removed file while a
// third locks a new one.
class RunFolderLock {
 public:
  // Locks `dir` (an existing folder) for `purpose` ("attnlab train", ...), or throws std::runtime_error:
  // "runs/x is in use by attnlab train (pid 123); wait for it to end or stop it (kill 123)".
  RunFolderLock(const std::string& dir, const std::string& purpose);
  ~RunFolderLock();
  RunFolderLock(RunFolderLock&& other) noexcept;
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;
  RunFolderLock& operator=(RunFolderLock&&) = delete;

 private:
  int fd_ = -1;
};

// Where training stands, as a checkpoint keeps it (besides the model and the optimizer).
struct TrainState {
  std::size_t step = 0;  // the last step taken
  double running_loss = 0;
  std::size_t running_count = 0;
  double best_eval = std::numeric_limits<double>::infinity();
  double train_seconds = 0;              // across resumes
  std::vector<std::int64_t> data_rng;    // the training data generator
  // A stop cut short the evaluations of `step` (and its pattern capture): a resume runs them first, so
  // that the run ends as one that was never stopped. Kept in the checkpoint only when true.
  bool evaluation_owed = false;
};

class RunFolder {
 public:
  // A new folder log.dir/name (name-2, name-3, ... when taken) holding config.yaml. Errors name the
  // folder and the fix (log.dir not writable, a file where the folder should be).
  static RunFolder create(const ExperimentConfig& config);
  // An existing run folder (an error when it is not one), cleared of what killed writers left in it, in
  // patterns/ and analysis/ (remove_stale_temporaries).
  static RunFolder open(const std::string& dir);
  // The error open() gives when `dir` is not a run folder, without touching it (for a command that
  // locks the folder first).
  static void check_is_run(const std::string& dir);
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  bool has(const std::string& file) const;
  // config.yaml, atomically.
  void write_config(const ExperimentConfig& config) const;
  void save_checkpoint(const std::string& file, const ExperimentConfig& config, const Module& model, const Optimizer& optimizer,
                       const TrainState& state, const data::DataSource& data) const;

 private:
  explicit RunFolder(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// The run's config as YAML: config.yaml, or when it is missing or empty (a kill while it was rewritten, a
// user's mistake) the config its checkpoint holds (best.ckpt, else last.ckpt), saying so on stderr.
// `restored_from` receives the checkpoint's file name then, else "".
std::string run_config_text(const std::string& dir, std::string* restored_from = nullptr);

// A run's checkpoint with the config that builds its model.
struct LoadedRun {
  std::string dir;
  std::string checkpoint_file;  // "best.ckpt" or "last.ckpt"
  Checkpoint checkpoint;
  ExperimentConfig config;      // config.yaml with the overrides, checked against the checkpoint's
  TrainState state;
  bool config_restored = false; // config.yaml was missing or empty: config comes from the checkpoint
};

// Opens the run in `dir` with its checkpoint `which` ("best" or "last"; "best" falls back to last.ckpt,
// saying so on stderr, when the run has no best.ckpt, as a run that diverged or stopped before its first
// evaluation). The config is config.yaml plus `overrides`, or the checkpoint's own when config.yaml is
// missing or empty; any difference from the checkpoint's config in a key that a run cannot change
// (everything but train.steps, the evaluation and logging cadence, ...) is an error naming both files.
LoadedRun load_run(const std::string& dir, const std::string& which, const std::vector<std::string>& overrides = {});
// A checkpoint the run kept (`file` under checkpoints/, train.keep_checkpoints), checked as load_run
// checks best.ckpt: one whose config differs from the run's in what a run cannot change (another run's
// file copied in) is refused, naming both.
LoadedRun load_kept_checkpoint(const std::string& dir, const std::string& file);
// The step the checkpoint at `path` holds; nothing when it is missing or unreadable.
std::optional<std::size_t> checkpoint_step(const std::string& path);

// On a rank other than 0 of a data-parallel job: the run rank 0 loaded (load_run(dir, "last", ...)),
// rebuilt from what it sent, its resolved config as YAML and its last.ckpt's bytes.
LoadedRun loaded_run_from(const std::string& dir, const std::string& config_yaml, const std::string& checkpoint_bytes);

// Loads the run's checkpointed weights into `model` (built from run.config); an error naming the file
// when they do not fit, or when `data` (what run.config reads now; null: the model alone, as sample
// uses it) is not the data the checkpoint was trained on (DataSource::fingerprint).
void load_run_model(Module& model, const LoadedRun& run, const data::DataSource* data);

// The model and training parts of a checkpoint.
std::map<std::string, Tensor> checkpoint_part(const Checkpoint& checkpoint, const std::string& prefix);

}  // namespace attnlab
