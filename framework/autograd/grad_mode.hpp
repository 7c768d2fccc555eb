// Grad mode: a thread-local switch that ops consult before recording a graph node.
#pragma once

namespace attnlab {

// True unless a NoGradGuard is alive on this thread.
bool grad_enabled();

// RAII: no graph is recorded on this thread while a guard is alive (nests; restores the previous mode).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace attnlab
