// The communicator and the gradient reducer (framework/distributed). ctest runs this binary as it is (a
// world of one: no MPI call, every collective a no-op) and under `mpirun -np 2` (tests/CMakeLists.txt):
// each rank fills its gradients with values known from its rank, and the sums come back as computed by
// hand. Every test makes the same collective calls on every rank whatever its checks find, so that a
// failure on one rank cannot leave the other waiting.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/distributed/communicator.hpp"
#include "framework/distributed/gradient_reducer.hpp"
#include "tests/private_temp_dir.hpp"

#ifdef ATTNLAB_WITH_MPI
#include <mpi.h>
#endif

using namespace attnlab;

namespace {

const dist::Communicator& world() { return dist::Communicator::world(); }

// Three parameters of 15, 7 and 8 numbers whose gradient element i of parameter p is, on rank r,
// (r + 1) * (i + 1 + 100 p); summed over N ranks: (i + 1 + 100 p) * N (N + 1) / 2.
std::vector<Tensor> filled_parameters(DType dtype) {
  std::vector<Tensor> params = {zeros({3, 5}, dtype), zeros({7}, dtype), zeros({2, 2, 2}, dtype)};
  const double r = world().rank();
  for (std::size_t p = 0; p < params.size(); ++p) {
    params[p].set_requires_grad();
    Tensor g = zeros(params[p].shape(), dtype);
    for (std::size_t i = 0; i < g.numel(); ++i) {
      const double v = (r + 1) * static_cast<double>(i + 1 + 100 * p);
      if (dtype == DType::float64) g.data<double>()[i] = v;
      else g.data<float>()[i] = static_cast<float>(v);
    }
    params[p].set_grad(g);
  }
  return params;
}

void expect_hand_computed_sums(const std::vector<Tensor>& params) {
  const double n = world().size(), ranks_sum = n * (n + 1) / 2;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const std::vector<double> g = params[p].grad().to_vector();
    for (std::size_t i = 0; i < g.size(); ++i)
      EXPECT_EQ(g[i], static_cast<double>(i + 1 + 100 * p) * ranks_sum) << "parameter " << p << " element " << i;
  }
}

TEST(GradientReducer, SumsEveryGradientInOneAllreduce) {
  std::vector<Tensor> params = filled_parameters(DType::float32);
  dist::GradientReducer reducer(world(), params);
  const double r = world().rank(), n = world().size();
  const std::vector<double> extra = reducer.reduce({r + 0.5, 1.0});
  expect_hand_computed_sums(params);
  ASSERT_EQ(extra.size(), 2u);
  EXPECT_EQ(extra[0], n * n / 2);  // sum of r + 0.5 over r < n
  EXPECT_EQ(extra[1], n);
  EXPECT_EQ(reducer.elements(), 30u);
  EXPECT_EQ(reducer.buckets(), 1u);
  if (world().distributed()) {
    EXPECT_EQ(reducer.bytes(), (30u + 3u + 2u) * sizeof(float));  // gradients, a flag per parameter, the extras
    EXPECT_EQ(reducer.reductions(), 1u);
  }
}

TEST(GradientReducer, SmallBucketsGiveTheSameSums) {
  std::vector<Tensor> params = filled_parameters(DType::float64);
  dist::GradientReducer reducer(world(), params, 4 * sizeof(double));
  reducer.reduce({1.0});
  expect_hand_computed_sums(params);
  if (world().distributed()) {
    EXPECT_EQ(reducer.buckets(), 9u);  // 30 + 3 + 1 numbers, 4 per bucket
  }
}

// A parameter only rank 0 has a gradient for gets rank 0's gradient everywhere; one that no rank has a
// gradient for keeps none (optimizers skip it, as in a single process).
TEST(GradientReducer, AGradientMissingOnSomeRanks) {
  std::vector<Tensor> params = filled_parameters(DType::float32);
  if (world().rank() != 0) params[1].zero_grad();
  params[2].zero_grad();
  dist::GradientReducer reducer(world(), params);
  reducer.reduce();
  ASSERT_TRUE(params[1].grad().defined());
  const std::vector<double> g = params[1].grad().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], static_cast<double>(i + 1 + 100));
  EXPECT_FALSE(params[2].grad().defined());
}

TEST(Communicator, BroadcastsRankZerosBytes) {
  std::string text = world().rank() == 0 ? std::string(100000, 'x') + "from rank 0" : "rank " + std::to_string(world().rank());
  world().broadcast(text);
  EXPECT_EQ(text, std::string(100000, 'x') + "from rank 0");
  double values[3] = {1.0 * world().rank(), 2, 0.25};
  world().sum(values, 3);
  const double n = world().size();
  EXPECT_EQ(values[0], n * (n - 1) / 2);
  EXPECT_EQ(values[1], 2 * n);
  EXPECT_EQ(values[2], 0.25 * n);
  world().barrier();
}

// What agree() makes of `fail` run on every rank: "" when it passed, else the own() message ("-" for none).
std::string agreed(const std::function<void()>& fail) {
  try {
    world().agree(fail);
    return "";
  } catch (const dist::JobFailed& failure) {
    if (!failure.own()) return "-";
    try {
      std::rethrow_exception(failure.own());
    } catch (const std::exception& e) {
      return e.what();
    }
  } catch (const std::exception& e) {
    return std::string("plain: ") + e.what();  // a world of one: the error itself
  }
  return "?";
}

// An error every rank meets is printed by rank 0 alone; one rank's own error by that rank; every rank
// learns of either, at the same call.
TEST(Communicator, AgreesOnAFailureAndWhoPrintsIt) {
  const int r = world().rank();
  EXPECT_EQ(agreed([] {}), "");
  const std::string same = agreed([] { throw std::runtime_error("the same"); });
  const std::string own = agreed([r] {
    if (r == world().size() - 1) throw std::runtime_error("rank " + std::to_string(r) + "'s own");
  });
  if (!world().distributed()) {
    EXPECT_EQ(same, "plain: the same");
    EXPECT_EQ(own, "plain: rank 0's own");
    return;
  }
  EXPECT_EQ(same, r == 0 ? "the same" : "-");
  EXPECT_EQ(own, r == world().size() - 1 ? "rank " + std::to_string(r) + "'s own" : "-");
}

// OpenMPI's mpi_yield_when_idle as this rank runs with it; what the launcher's environment said before
// init (null: nothing), kept by main.
const char* g_yield_chosen = nullptr;

// A rank waiting in a collective yields its core to the rank it waits for, unless the user chose
// otherwise (tests/CMakeLists.txt runs this under mpirun with and without --mca mpi_yield_when_idle 0).
TEST(Communicator, AWaitingRankYieldsItsCoreUnlessTheUserChose) {
  if (!world().distributed()) GTEST_SKIP() << "needs mpirun";
#ifdef ATTNLAB_WITH_MPI
  int provided = 0, index = 0, count = 0;
  ASSERT_EQ(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided), MPI_SUCCESS);
  ASSERT_EQ(MPI_T_cvar_get_index("mpi_yield_when_idle", &index), MPI_SUCCESS);
  MPI_T_cvar_handle handle;
  ASSERT_EQ(MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count), MPI_SUCCESS);
  long long value = 0;  // an MCA bool is read as an int
  ASSERT_EQ(MPI_T_cvar_read(handle, &value), MPI_SUCCESS);
  MPI_T_cvar_handle_free(&handle);
  MPI_T_finalize();
  const bool chosen_no = g_yield_chosen && std::string(g_yield_chosen) == "0";
  EXPECT_EQ(static_cast<int>(value) != 0, !chosen_no) << "OMPI_MCA_mpi_yield_when_idle was " << (g_yield_chosen ? g_yield_chosen : "unset");
#endif
}

// Without a launcher nothing initialises MPI: a plain process is a world of one that made no MPI call.
TEST(Communicator, APlainProcessIsAWorldOfOne) {
  if (dist::launched_by_mpi()) GTEST_SKIP() << "started by an MPI launcher";
  EXPECT_EQ(world().size(), 1);
  EXPECT_EQ(world().rank(), 0);
  EXPECT_FALSE(world().distributed());
#ifdef ATTNLAB_WITH_MPI
  int initialised = 1;
  MPI_Initialized(&initialised);
  EXPECT_EQ(initialised, 0);
#endif
}

TEST(Communicator, LauncherVariables) {
  for (const char* entry : {"OMPI_COMM_WORLD_SIZE=2", "PMIX_RANK=1", "PMI_SIZE=4", "OPAL_PREFIX=/usr"})
    EXPECT_TRUE(dist::is_launcher_variable(entry)) << entry;
  for (const char* entry : {"OMP_NUM_THREADS=2", "PATH=/usr/bin", "OPENBLAS_CORETYPE=Haswell", "XOMPI_X=1"})
    EXPECT_FALSE(dist::is_launcher_variable(entry)) << entry;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const attnlab::testing::PrivateTempDir temp;  // each process's files its own (private_temp_dir.hpp)
  g_yield_chosen = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  if (g_yield_chosen) g_yield_chosen = strdup(g_yield_chosen);  // init may change the environment
  dist::Communicator::init(&argc, &argv);
  const int status = RUN_ALL_TESTS();
  dist::Communicator::finalize();
  return status;
}
