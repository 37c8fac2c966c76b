// The fabric tools' output as they print it (recorded in tests/bench/fixtures), read into figures.
#include "cli/transport_tools.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace rfos::cli {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream f(std::string(RFOS_FIXTURES) + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TransportTools, UcxPerftestBothLayouts) {
  auto one = parse_ucx_perftest(fixture("ucx_perftest_am_bw.txt"));
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ(one->msg_rate, 141407);
  EXPECT_DOUBLE_EQ(one->bw_bytes, 552.37 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(one->p50_us, 5.788);
  auto threads = parse_ucx_perftest(fixture("ucx_perftest_am_bw_threads.txt"));
  ASSERT_TRUE(threads.is_ok());
  EXPECT_EQ(threads->msg_rate, 179535);
  EXPECT_DOUBLE_EQ(threads->bw_bytes, 701.31 * 1024 * 1024);
  // A column whose last interval measured nothing reads "inf" (seen with two pairs at once on a loaded machine):
  // the columns after it are still the overall figures.
  auto inf = parse_ucx_perftest(fixture("ucx_perftest_am_bw_inf.txt"));
  ASSERT_TRUE(inf.is_ok()) << inf.status().to_string();
  EXPECT_EQ(inf->msg_rate, 249);
  EXPECT_DOUBLE_EQ(inf->bw_bytes, 249.01 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(inf->p50_us, 19.879);
  EXPECT_EQ(parse_ucx_perftest("connection refused\n").status().code(), StatusCode::kInvalidArgument);
}

TEST(TransportTools, FiPingpong) {
  auto r = parse_fi_pingpong(fixture("fi_pingpong.txt"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->msg_rate, 1e6 / 42.47);
  EXPECT_DOUBLE_EQ(r->bw_bytes, 96.44e6);
  EXPECT_EQ(parse_fi_pingpong("bytes   #sent   #ack     total\n").status().code(), StatusCode::kInvalidArgument);
}

TEST(TransportTools, ProvidersWithoutATool) {
  EXPECT_EQ(transport_ceiling("ucx+rc", 4096, 1).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(transport_ceiling("ofi+verbs", 4096, 1).status().code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace rfos::cli
