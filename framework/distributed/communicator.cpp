#include "framework/distributed/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#ifdef ATTNLAB_WITH_MPI
#include <mpi.h>
#endif

namespace attnlab::dist {
namespace {

// The world size an MPI launcher announced in the environment, 0 when none did: OpenMPI's mpirun,
// PMIx (OpenMPI 4+, srun --mpi=pmix) and PMI-1/2 (srun --mpi=pmi2, MPICH's launchers).
int announced_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  // PMIx sets the rank but not always the size; a rank alone still means "started by a launcher".
  return std::getenv("PMIX_RANK") || std::getenv("PMI_RANK") ? 1 : 0;
}

#ifdef ATTNLAB_WITH_MPI
constexpr const char* kYieldVariable = "OMPI_MCA_mpi_yield_when_idle";

// MPI counts are ints: a long buffer goes in pieces of at most INT_MAX elements.
template <class F>
void in_pieces(std::size_t count, F f) {
  for (std::size_t start = 0; start < count; start += INT_MAX) f(start, static_cast<int>(std::min<std::size_t>(INT_MAX, count - start)));
}
#endif

}  // namespace

bool launched_by_mpi() { return announced_size() > 0; }
int launched_world_size() { return std::max(1, announced_size()); }

bool is_launcher_variable(const std::string& entry) {
  for (const char* prefix : {"OMPI_", "PMIX_", "PMI_", "OPAL_"})
    if (entry.rfind(prefix, 0) == 0) return true;
  return false;
}

Communicator& Communicator::world() {
  static Communicator world;
  return world;
}

void Communicator::init(int* argc, char*** argv) {
  Communicator& w = world();
  if (w.initialised_ || !launched_by_mpi()) return;
#ifdef ATTNLAB_WITH_MPI
  // A rank that waits in a collective polls for its end, and OpenMPI gives the core up between polls
  // (mpi_yield_when_idle) only on a node it sees oversubscribed: on a machine busy with other work the
  // waiting rank took CPU from the rank it waited for (measured 2026-11-27, docs/distributed.md: 2-process runs
  // 1.2-2.8x the time of one process, 0.8-1.4x when yielding). Set unless the user chose: mpirun's
  // `--mca mpi_yield_when_idle 0` sets this same variable (a choice in an MCA parameter file loses to it).
  setenv(kYieldVariable, "1", 0);
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  w.initialised_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
  MPI_Comm local;  // the ranks that share this machine's memory, to share its cores
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank_, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &w.local_size_);
  MPI_Comm_free(&local);
#else
  (void)argc, (void)argv;
  if (launched_world_size() > 1) {
    throw std::runtime_error("started by mpirun with " + std::to_string(launched_world_size()) +
                             " processes, but this attnlab was built without MPI (-DATTNLAB_MPI=OFF); rebuild with "
                             "libopenmpi-dev installed (scripts/setup.sh) or run a single process");
  }
#endif
}

void Communicator::finalize() {
#ifdef ATTNLAB_WITH_MPI
  Communicator& w = world();
  if (!w.initialised_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  w.initialised_ = false;
#endif
}

void Communicator::abort(const std::string& message, int status) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
#ifdef ATTNLAB_WITH_MPI
  if (world().initialised_) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  std::exit(status);
}

std::string Communicator::who() const { return "rank " + std::to_string(rank_) + " of " + std::to_string(size_); }

void Communicator::broadcast(void* data, std::size_t bytes, int root) const {
  if (size_ == 1) return;
#ifdef ATTNLAB_WITH_MPI
  in_pieces(bytes, [&](std::size_t start, int n) { MPI_Bcast(static_cast<char*>(data) + start, n, MPI_BYTE, root, MPI_COMM_WORLD); });
#else
  (void)data, (void)bytes, (void)root;
#endif
}

void Communicator::broadcast(std::string& bytes, int root) const {
  if (size_ == 1) return;
  std::uint64_t length = bytes.size();
  broadcast(&length, sizeof length, root);
  bytes.resize(length);
  broadcast(bytes.data(), length, root);
}

void Communicator::sum(float* values, std::size_t count) const {
  if (size_ == 1) return;
#ifdef ATTNLAB_WITH_MPI
  in_pieces(count, [&](std::size_t start, int n) { MPI_Allreduce(MPI_IN_PLACE, values + start, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
#else
  (void)values, (void)count;
#endif
}

void Communicator::sum(double* values, std::size_t count) const {
  if (size_ == 1) return;
#ifdef ATTNLAB_WITH_MPI
  in_pieces(count, [&](std::size_t start, int n) { MPI_Allreduce(MPI_IN_PLACE, values + start, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); });
#else
  (void)values, (void)count;
#endif
}

void Communicator::agree(const std::function<void()>& work) const {
  if (size_ == 1) return work();
  std::exception_ptr error;
  std::string message;
  try {
    work();
  } catch (const std::exception& e) {
    error = std::current_exception();
    message = e.what();
  }
  double failed = error ? 1 : 0;
  sum(&failed, 1);
  if (failed == 0) return;
  std::string first = rank_ == 0 ? message : "";  // rank 0's error ("" when it had none)
  broadcast(first);
  throw JobFailed(error && (rank_ == 0 || message != first) ? error : nullptr);
}

void Communicator::barrier() const {
  if (size_ == 1) return;
#ifdef ATTNLAB_WITH_MPI
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
#endif
}

}  // namespace attnlab::dist
