// main() of the integration tests: pins every fabric to the loopback interface before anything starts (the
// servers these tests spawn inherit it), since UCX and libfabric otherwise pick the machine's other interface.
#include <gtest/gtest.h>

#include <cstdlib>

#include "loopback.h"

int main(int argc, char** argv) {
  rfos::testing::pin_fabrics_to_loopback();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
