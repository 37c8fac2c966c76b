// The libfabric worker's peer table is bounded: a flood of made-up addresses (every message names its sender's
// address, and a hostile peer may name any) costs at most kMaxPeers entries; the idlest are forgotten, and a
// forgotten peer's handle fails instead of reaching whoever took its place. Loopback only.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "transport/transport.h"

namespace rfos::transport {
namespace {

TEST(OfiPeers, TableIsBoundedAndForgottenHandlesFail) {
  setenv("FI_TCP_IFACE", "lo", 0);
  setenv("FI_NET_IFACE", "lo", 0);
  auto a = Worker::create("ofi+tcp");
  auto b = Worker::create("ofi+tcp");
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  // Addresses as ofi+tcp writes them (a sockaddr_in), of ports nobody listens on: nothing is sent to them.
  auto fake = [](uint16_t port) {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return std::string(reinterpret_cast<const char*>(&sin), sizeof(sin));
  };
  auto first = (*a)->connect(fake(1));
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  for (uint16_t port = 2; port < 2 + 5000; ++port) {
    auto h = (*a)->connect(fake(port));
    ASSERT_TRUE(h.is_ok()) << port << ": " << h.status().to_string();
    ASSERT_NE(*h, *first) << "a handle was reused";
  }
  Status s = (*a)->send(*first, "hello?", {}, [](Status) {});
  EXPECT_EQ(s.code(), StatusCode::kShutdown)
      << "the first of 5001 idle peers should have been forgotten: " << s.to_string();
  // A real peer still gets through.
  std::string got;
  (*b)->on_message([&](Incoming& in) { got.assign(in.header); });
  auto to_b = (*a)->connect((*b)->address());
  ASSERT_TRUE(to_b.is_ok()) << to_b.status().to_string();
  bool sent = false;
  ASSERT_TRUE((*a)->send(*to_b, "after the flood", {}, [&](Status st) { sent = st.is_ok(); }).is_ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((got.empty() || !sent) && std::chrono::steady_clock::now() < deadline) {
    (*a)->progress();
    (*b)->progress();
  }
  EXPECT_EQ(got, "after the flood");
  EXPECT_TRUE(sent);
}

}  // namespace
}  // namespace rfos::transport
