// The communicator of a job on OpenMPI: who this process is (rank of size, and how many ranks share its
// machine), and the collectives attnlab needs: broadcast (rank 0's parameters, checkpoint and plans to
// everyone), a sum over the ranks in place (the gradients, in one flat buffer), and a barrier.
//
// MPI is initialised only when the process was started by an MPI launcher (mpirun or mpiexec, or srun
// with PMIx/PMI2), which it recognises by the variables the launcher sets (OMPI_COMM_WORLD_SIZE,
// PMIX_RANK, PMI_SIZE, ...). A plain `attnlab train` is a world of one: it makes no MPI call at all
// (libmpi is linked, so the shared library is loaded, but nothing initialises it) and every collective
// is a no-op, so nothing changes without mpirun. A build configured with -DATTNLAB_MPI=OFF has no MPI;
// launched by mpirun with more than one process it refuses to start rather than run N independent
// copies into one folder.
//
// Errors: MPI_COMM_WORLD keeps OpenMPI's default handler (MPI_ERRORS_ARE_FATAL), so a failed collective
// ends the whole job, and mpirun ends the job when a rank dies ("mpirun noticed that process rank 1 ...
// exited on signal 9"); abort() is for attnlab's own errors on one rank. No rank ever waits forever.
// An error that every rank meets alike (a config error, a batch that does not split) is agreed on
// instead (agree()), printed once, and every rank ends normally.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace attnlab::dist {

// Whether an MPI launcher started this process, and the world size it announced (1 when none did).
bool launched_by_mpi();
int launched_world_size();
// Whether an environment entry ("NAME=value") is one of the variables through which a launcher tells a
// process that it is an MPI rank (OMPI_*, PMIX_*, PMI_*, OPAL_*). A rank drops them from the environment
// of the child processes it starts, which are then plain single-process programs.
bool is_launcher_variable(const std::string& entry);

// Thrown by Communicator::agree on every rank when the work failed on any: the job ends, every rank at
// the same point, and no rank waits for another.
class JobFailed : public std::exception {
 public:
  explicit JobFailed(std::exception_ptr own) : own_(std::move(own)) {}
  const char* what() const noexcept override { return "the job failed (on some rank)"; }
  // This rank's error, to print: null when this rank did not fail, or when it is not rank 0 and failed
  // with rank 0's message (which rank 0 prints).
  const std::exception_ptr& own() const { return own_; }

 private:
  std::exception_ptr own_;
};

class Communicator {
 public:
  // The world. Before init() (and without a launcher) a world of one.
  static Communicator& world();
  // MPI_Init_thread (funneled: only the main thread calls MPI) when launched by MPI, with OpenMPI's
  // waiting ranks yielding their core (mpi_yield_when_idle) unless the user chose; otherwise nothing.
  // Throws when the launcher asks for more than one process and this build has no MPI.
  static void init(int* argc, char*** argv);
  // MPI_Finalize when init() initialised MPI; safe to call more than once.
  static void finalize();
  // Ends every process of the job at once (MPI_Abort, whose code mpirun exits with) after `message`
  // went to stderr; without MPI, exit(status).
  [[noreturn]] static void abort(const std::string& message, int status);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // ranks on this machine (this one included)
  bool distributed() const { return size_ > 1; }
  // "rank 1 of 4", for messages.
  std::string who() const;

  // Copies `bytes` bytes at `data` from `root` to every rank.
  void broadcast(void* data, std::size_t bytes, int root = 0) const;
  // A byte string of any length from `root` (its length first), e.g. a checkpoint file's contents.
  void broadcast(std::string& bytes, int root = 0) const;
  // Sums `count` values over the ranks, in place on every rank (one MPI_Allreduce per 2^31 - 1 values).
  void sum(float* values, std::size_t count) const;
  void sum(double* values, std::size_t count) const;
  // Runs `work` (which every rank runs, with no collective inside) and agrees on its outcome: when it
  // threw on any rank, every rank throws JobFailed, whose own() is the error this rank should print. In
  // a world of one, `work`'s own exception passes through.
  void agree(const std::function<void()>& work) const;
  // Waits until every rank has called it, without spinning a core (MPI_Ibarrier polled every 10 ms): a
  // rank that finished its share of a comparison leaves the machine's cores to the other ranks' runs.
  void barrier() const;

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1;
  bool initialised_ = false;
};

}  // namespace attnlab::dist
