// Targets over the simulated fabric (transport/sim) in the test's own process, and sessions for the real client
// to open against them, as the control plane would grant them: for tests beside the client's and the target's
// code that need no server process. Each target's engine is real, in a temporary directory.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/container.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "engine/power_cut.h"
#include "server/target.h"
#include "transport/sim/sim.h"
#include "wire/capability.h"

namespace rfos::server::testing {

using client::Container;
using client::ContainerOptions;
using client::Session;

inline std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
inline std::span<uint8_t> bytes(std::string& s) { return {reinterpret_cast<uint8_t*>(s.data()), s.size()}; }

class SimCluster : public ::testing::Test {
 protected:
  void SetUp() override { start(2); }
  void TearDown() override {
    clock::reset();
    transport::sim::Fabric::process().set_knobs({});
    targets_.clear();
    engines_.clear();
  }

  // `power_cut_seed`: each engine under a power-cut seam (engine/power_cut.h) for power_cut_and_restart().
  void start(uint32_t n, uint64_t power_cut_seed = 0) {
    ASSERT_FALSE(dir_.path().empty());
    ServerConfig config;
    config.provider = "sim";
    config.media_threads = 1;
    bool fresh = engines_.empty() && cuts_.empty();
    for (uint32_t i = 0; i < n; ++i) {
      engine::EngineOptions o;
      o.dir = dir_.path() + "/target-" + std::to_string(i);
      o.block_file_bytes = 64ull << 20;
      o.arena_bytes = 16ull << 20;
      if (power_cut_seed) {
        cuts_.push_back(std::make_unique<engine::PowerCut>(power_cut_seed + i));
        o.power_cut = cuts_.back().get();
      }
      auto e = engine::Engine::open(o);
      ASSERT_TRUE(e.is_ok()) << e.status().to_string();
      if (fresh || power_cut_seed) {
        Status p = (*e)->pool_create(pool_);
        ASSERT_TRUE(p.is_ok() || p.code() == StatusCode::kAlreadyExists);
        Status c = (*e)->cont_create(pool_, cont_, {});
        ASSERT_TRUE(c.is_ok() || c.code() == StatusCode::kAlreadyExists);
      }
      engines_.push_back(std::move(e).value());
      auto t = Target::start(i, n, engines_.back().get(), config, secret_, revocations_, qos_, claims_);
      ASSERT_TRUE(t.is_ok()) << t.status().to_string();
      targets_.push_back(std::move(t).value());
    }
  }

  // A session as the control plane would grant it: `rights` for `ttl_ms` from now.
  Session session(uint8_t rights = wire::Capability::kRead | wire::Capability::kWrite, int64_t ttl_ms = 3600000) {
    wire::Capability cap;
    cap.session = Uuid::random();
    cap.pool = pool_;
    cap.cont = cont_;
    cap.rights = rights;
    cap.expires_unix_ms = static_cast<uint64_t>(static_cast<int64_t>(wall_ms()) + ttl_ms);
    Session s;
    s.session_id.assign(reinterpret_cast<const char*>(cap.session.bytes.data()), 16);
    s.capability = wire::encode_capability(cap, {reinterpret_cast<const uint8_t*>(secret_.data()), secret_.size()});
    s.expires_unix_ms = cap.expires_unix_ms;
    s.provider = "sim";
    for (auto& t : targets_) s.target_addresses.push_back(t->address());
    s.pool.uuid = pool_.to_string();
    s.cont.uuid = cont_.to_string();
    return s;
  }

  std::unique_ptr<Container> open(Session s, uint32_t timeout_ms = 30000) {
    ContainerOptions o;
    o.timeout_ms = timeout_ms;
    auto c = Container::open(std::move(s), o);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    return c.is_ok() ? std::move(c).value() : nullptr;
  }

  // Cuts the power of every target at once (what was not durable is lost or torn, engine/power_cut.h), and
  // starts them again on what is left, without the seams. Sessions opened before go to targets that are gone.
  void power_cut_and_restart() {
    uint32_t n = static_cast<uint32_t>(targets_.size());
    for (auto& c : cuts_) c->cut();
    targets_.clear();
    engines_.clear();
    for (auto& c : cuts_) ASSERT_TRUE(c->apply().is_ok());
    cuts_.clear();
    start(n);
  }

  engine::testing::TempDir dir_;
  std::vector<std::unique_ptr<engine::PowerCut>> cuts_;
  Uuid pool_ = Uuid::random(), cont_ = Uuid::random();
  std::string secret_ = std::string(32, 's');
  std::shared_ptr<Revocations> revocations_ = std::make_shared<Revocations>();
  std::shared_ptr<QosLedger> qos_ = std::make_shared<QosLedger>();
  std::shared_ptr<GrantClaims> claims_ = std::make_shared<GrantClaims>();
  std::vector<std::unique_ptr<engine::Engine>> engines_;
  std::vector<std::unique_ptr<Target>> targets_;
};

}  // namespace rfos::server::testing
