// The main of every GoogleTest binary but test_distributed (which initialises MPI in its own): each test
// process runs with a temporary folder of its own (private_temp_dir.hpp says why).
#include <gtest/gtest.h>

#include "tests/private_temp_dir.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const attnlab::testing::PrivateTempDir temp;
  return RUN_ALL_TESTS();
}
