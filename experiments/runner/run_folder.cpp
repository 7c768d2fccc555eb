#include "experiments/runner/run_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "framework/io/atomic_file.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

bool blank(const std::string& text) { return text.find_first_not_of(" \t\r\n") == std::string::npos; }

TrainState state_of(const Checkpoint& ck, const std::string& file) {
  TrainState s;
  try {
    s.step = static_cast<std::size_t>(ck.tensors.at("step").item());
    const auto saved = ck.tensors.at("running_loss").to_vector();
    s.running_loss = saved.at(0);
    s.running_count = static_cast<std::size_t>(saved.at(1));
    s.best_eval = saved.at(2);
    s.train_seconds = saved.at(3);
    const Tensor rng = ck.tensors.at("rng.data");
    s.data_rng.assign(rng.data<std::int64_t>(), rng.data<std::int64_t>() + rng.numel());
    s.evaluation_owed = ck.tensors.count("evaluation_owed") && ck.tensors.at("evaluation_owed").item() != 0;
  } catch (const std::out_of_range&) {
    throw std::runtime_error(file + " is not a training checkpoint of attnlab (its training state is missing)");
  }
  return s;
}

// The checkpoint's own config text.
std::string config_text_of(const Checkpoint& ck, const std::string& file) {
  const auto it = ck.texts.find("config");
  if (it == ck.texts.end() || blank(it->second)) throw std::runtime_error(file + " holds no config");
  return it->second;
}

// A config that differs from the one the checkpoint was trained with, in keys a run cannot change.
void check_same_model(const LoadedRun& run, const ExperimentConfig& trained, const std::string& config_file) {
  const std::vector<KeyDifference> diff = config_differences(run.config, trained, false);
  if (diff.empty()) return;
  std::string list;
  for (const KeyDifference& d : diff) list += "\n  " + d.key + ": " + d.first + " here, " + d.second + " in the checkpoint";
  // Bad input (an override or an edit), as any config error: ValueError from Python.
  throw std::invalid_argument(config_file + " (with the command line's overrides) does not describe the run that " + run.dir + "/" +
                           run.checkpoint_file + " holds:" + list +
                           "\nput the keys back as the checkpoint has them, or start a new run from this config with "
                           "`attnlab train " + config_file + "`");
}

// What the holder of a run folder's lock wrote in it: "123 attnlab train" (empty while it is still
// writing, or when it wrote nothing).
std::string lock_holder(int fd) {
  char text[256] = {};
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  std::string holder(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder;
}

// "runs/x is in use by attnlab train (pid 123), ..." from the holder's "123 attnlab train".
std::string in_use_message(const std::string& dir, const std::string& holder, const std::string& purpose) {
  const std::size_t space = holder.find(' ');
  const std::string pid = holder.substr(0, space);
  const bool known = !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos && space != std::string::npos;
  const std::string who = known ? holder.substr(space + 1) + " (pid " + pid + ")" : "another process";
  return dir + " is in use by " + who + ", so " + purpose + " cannot write it; wait for it to end or stop it" +
         (known ? " (kill " + pid + ")" : "");
}

}  // namespace

RunFolderLock::RunFolderLock(const std::string& dir, const std::string& purpose) {
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path + " (" + std::strerror(errno) + "); make " + dir + " writable");
  if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
    const std::string holder = std::to_string(getpid()) + " " + purpose + "\n";
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, holder.data(), holder.size(), 0) < 0) {
      std::fprintf(stderr, "attnlab: warning: cannot write %s (%s); a refused second writer will not be told who holds it\n",
                   path.c_str(), std::strerror(errno));
    }
    return;
  }
  const int error = errno;
  const std::string holder = lock_holder(fd_);
  ::close(fd_);
  fd_ = -1;
  if (error == EWOULDBLOCK) throw std::runtime_error(in_use_message(dir, holder, purpose));
  // A file system without locks (an NFS mount without its lock service): the run goes on unguarded.
  std::fprintf(stderr, "attnlab: warning: cannot lock %s (%s); nothing stops a second process from writing this run at the same time\n",
               path.c_str(), std::strerror(error));
}

RunFolderLock::RunFolderLock(RunFolderLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunFolderLock::~RunFolderLock() {
  if (fd_ < 0) return;
  // Emptied before it is unlocked, so that a process that locks it next and has not yet written its own
  // pid is never taken for this one (best effort: a failure only makes that message name the wrong pid).
  const int emptied = ftruncate(fd_, 0);
  (void)emptied;
  ::close(fd_);
}

std::string folder_name_problem(const std::string& name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "'" + name + "' is not a folder of its own";
  if (name.size() > 200) return "it is " + std::to_string(name.size()) + " characters long; keep it under 200";
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || ch == '_' || ch == '-' || ch == '.') continue;
    if (c < 0x20 || c == 0x7f) return "it holds a newline, tab or other control character; use letters, digits, '_', '-' and '.'";
    if (ch == '/') return "it holds '/', which would put the run outside log.dir; use letters, digits, '_', '-' and '.'";
    return "it holds '" + std::string(1, ch) + "'; use letters, digits, '_', '-' and '.'";
  }
  return "";
}

RunFolder RunFolder::create(const ExperimentConfig& c) {
  create_folders(c.log.dir, "log.dir");
  std::error_code ec;
  for (int i = 1;; ++i) {
    const fs::path dir = fs::path(c.log.dir) / (i == 1 ? c.name : c.name + "-" + std::to_string(i));
    if (fs::exists(dir)) continue;
    if (!fs::create_directory(dir, ec)) {
      if (!ec) continue;  // taken between the two calls
      throw std::runtime_error("cannot create the run folder " + dir.string() + " (" + ec.message() + "); set log.dir to a folder you can write");
    }
    RunFolder folder(dir.string());
    folder.write_config(c);
    return folder;
  }
}

void RunFolder::check_is_run(const std::string& dir) {
  if (!fs::is_directory(dir)) throw RunFileMissing(dir + " is not a folder; give a run folder (log.dir/name)");
  if (!fs::exists(dir + "/config.yaml") && !fs::exists(dir + "/last.ckpt")) {
    throw RunFileMissing(dir + " is not a run folder: it has neither config.yaml nor last.ckpt");
  }
}

RunFolder RunFolder::open(const std::string& dir) {
  check_is_run(dir);
  remove_stale_temporaries(dir, {"patterns", "analysis"}, {"analysis"});
  return RunFolder(dir);
}

bool RunFolder::has(const std::string& file) const { return fs::exists(path(file)); }

void RunFolder::write_config(const ExperimentConfig& c) const { write_file_atomically(path("config.yaml"), config_to_yaml(c)); }

void RunFolder::save_checkpoint(const std::string& file, const ExperimentConfig& c, const Module& model, const Optimizer& optimizer,
                                const TrainState& s, const data::DataSource& data) const {
  Checkpoint ck;
  for (const auto& [name, t] : model.state_dict()) ck.tensors["model." + name] = t;
  for (const auto& [name, t] : optimizer.state_dict()) ck.tensors["optim." + name] = t;
  ck.tensors["rng.data"] = from_indices(s.data_rng, {s.data_rng.size()});
  ck.tensors["step"] = from_indices({static_cast<std::int64_t>(s.step)}, {});
  if (s.evaluation_owed) ck.tensors["evaluation_owed"] = from_indices({1}, {});
  ck.tensors["running_loss"] =
      from_vector({s.running_loss, static_cast<double>(s.running_count), s.best_eval, s.train_seconds}, {4}, DType::float64);
  ck.texts["config"] = config_to_yaml(c);
  ck.texts["vocabulary"] = data.vocabulary();
  const std::string fingerprint = data.fingerprint();
  if (!fingerprint.empty()) ck.texts["data"] = fingerprint;
  attnlab::save_checkpoint(path(file), ck);
}

std::map<std::string, Tensor> checkpoint_part(const Checkpoint& ck, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : ck.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace(name.substr(prefix.size()), t);
  return out;
}

namespace {

// The text of the run's config.yaml, or when it is missing or empty `fallback()` (the config a checkpoint
// holds, `fallback_name`), saying so on stderr; `restored` tells which.
std::string config_yaml_or(const std::string& dir, const std::string& fallback_name, const std::function<std::string()>& fallback,
                           bool* restored) {
  const std::string path = dir + "/config.yaml";
  const bool exists = fs::exists(path);
  std::string text = exists ? read_file(path, "run's config") : "";
  *restored = blank(text);
  if (!*restored) return text;
  std::string stored = fallback();  // first: a folder without the checkpoint either is an error, not a notice
  std::fprintf(stderr, "attnlab: %s is %s; using the config stored in %s\n", path.c_str(), exists ? "empty" : "missing", fallback_name.c_str());
  return stored;
}

}  // namespace

std::string run_config_text(const std::string& dir, std::string* restored_from) {
  const std::string checkpoint = fs::exists(dir + "/best.ckpt") ? "best.ckpt" : "last.ckpt";
  bool restored = false;
  std::string text = config_yaml_or(dir, checkpoint, [&] {
    const std::string path = dir + "/" + checkpoint;
    if (!fs::exists(path)) throw std::runtime_error(dir + " has neither a config.yaml nor a checkpoint to read its config from");
    return config_text_of(load_checkpoint(path), path);
  }, &restored);
  if (restored_from) *restored_from = restored ? checkpoint : "";
  return text;
}

namespace {

// Reads run.dir/run.checkpoint_file into `run`, with the run's config (config.yaml plus `overrides`, or
// the checkpoint's own when config.yaml is missing or empty), refused when the two differ in what a run
// cannot change.
void read_checkpoint(LoadedRun& run, const std::vector<std::string>& overrides) {
  const std::string checkpoint_path = run.dir + "/" + run.checkpoint_file, config_path = run.dir + "/config.yaml";
  run.checkpoint = load_checkpoint(checkpoint_path);
  run.state = state_of(run.checkpoint, checkpoint_path);
  const std::string trained_text = config_text_of(run.checkpoint, checkpoint_path);
  const ExperimentConfig trained = parse_config(trained_text, checkpoint_path + " (its config)");
  const std::string text = config_yaml_or(run.dir, run.checkpoint_file, [&] { return trained_text; }, &run.config_restored);
  run.config = parse_config(text, config_path, overrides);
  check_same_model(run, trained, config_path);
}

}  // namespace

LoadedRun load_run(const std::string& dir, const std::string& which, const std::vector<std::string>& overrides) {
  if (which != "best" && which != "last") throw std::invalid_argument("--checkpoint must be best or last, got '" + which + "'");
  const RunFolder folder = RunFolder::open(dir);
  LoadedRun run;
  run.dir = dir;
  run.checkpoint_file = which + ".ckpt";
  if (which == "best" && !folder.has("best.ckpt") && folder.has("last.ckpt")) {
    std::fprintf(stderr, "attnlab: %s has no best.ckpt (no evaluation finished with a finite loss before it stopped); "
                         "using last.ckpt\n", dir.c_str());
    run.checkpoint_file = "last.ckpt";
  }
  if (!folder.has(run.checkpoint_file)) {
    throw RunFileMissing(dir + " has no " + run.checkpoint_file + " (it stopped before writing one); train it again");
  }
  read_checkpoint(run, overrides);
  return run;
}

LoadedRun load_kept_checkpoint(const std::string& dir, const std::string& file) {
  LoadedRun run;
  run.dir = dir;
  run.checkpoint_file = "checkpoints/" + file;
  read_checkpoint(run, {});
  return run;
}

std::optional<std::size_t> checkpoint_step(const std::string& path) {
  try {
    return state_of(load_checkpoint(path), path).step;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

LoadedRun loaded_run_from(const std::string& dir, const std::string& config_yaml, const std::string& checkpoint_bytes) {
  LoadedRun run;
  run.dir = dir;
  run.checkpoint_file = "last.ckpt";
  const std::string checkpoint_path = dir + "/last.ckpt (as rank 0 read it)";
  run.checkpoint = parse_checkpoint(checkpoint_bytes, checkpoint_path);
  run.state = state_of(run.checkpoint, checkpoint_path);
  run.config = parse_config(config_yaml, dir + "/config.yaml (as rank 0 resolved it)");
  return run;
}

void load_run_model(Module& model, const LoadedRun& run, const data::DataSource* data) {
  const auto trained_on = run.checkpoint.texts.find("data");
  if (data && trained_on != run.checkpoint.texts.end() && data->fingerprint() != trained_on->second) {
    std::error_code ec;
    const std::string here = fs::current_path(ec).string();
    throw std::invalid_argument(run.dir + "/" + run.checkpoint_file + " was trained on other data than its config reads now (" +
                                data->fingerprint() + ", where it read " + trained_on->second + "): task " + run.config.task.name +
                                "'s files have changed, or a relative path is read from another folder than the run's (this one is " +
                                here + "). Run attnlab from the folder the run was trained from, or restore the files");
  }
  const std::map<std::string, Tensor> state = checkpoint_part(run.checkpoint, "model.");
  try {
    model.load_state_dict(state);
  } catch (const std::invalid_argument& e) {
    // Until 2026-11-26 a ViT always had a CLS token while its config.yaml said `pooling: mean`.
    const auto names = model.named_parameters();
    const bool old_vit = state.count("cls") && std::none_of(names.begin(), names.end(), [](const NamedParameter& p) { return p.name == "cls"; });
    throw std::runtime_error(run.dir + "/" + run.checkpoint_file + " does not fit the model of its config: " + e.what() +
                             (old_vit ? "\n  This ViT was trained when every ViT had a CLS token, whatever its config.yaml says; set "
                                        "`pooling: cls` under `model:` in " + run.dir + "/config.yaml"
                                      : ""));
  }
}

}  // namespace attnlab
