// The registration cache over the simulated fabric's registrations.
#include "client/registration_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <span>
#include <vector>

#include "transport/sim/sim.h"

namespace rfos::client {
namespace {

class RegistrationCacheTest : public ::testing::Test {
 protected:
  transport::sim::Fabric fabric_;
  std::unique_ptr<transport::Worker> worker_ = std::move(fabric_.create_worker()).value();
  std::set<uintptr_t> busy_;
  RegistrationCache cache_{worker_.get(), [this](uintptr_t r) { return busy_.count(r) != 0; }};
};

TEST_F(RegistrationCacheTest, CachedRegionsCoverWholePagesAndTheOldestGoesFirst) {
  size_t pages = RegistrationCache::kMaxCached + 2;
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(4096, pages * 4096)),
                                                  &std::free);
  std::span<char> mem(buf.get(), pages * 4096);
  auto first = cache_.add(mem.data() + 4096 + 10, 100, false);
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ((*first)->first, reinterpret_cast<uintptr_t>(mem.data() + 4096));
  EXPECT_NE(cache_.find(mem.data() + 4096 + 200, 50), cache_.end()) << "a neighbour on the same page shares it";
  busy_.insert((*first)->first);
  for (size_t i = 2; i < RegistrationCache::kMaxCached + 2; ++i)
    ASSERT_TRUE(cache_.add(mem.data() + i * 4096, 1, false).is_ok());
  EXPECT_LE(cache_.size(), RegistrationCache::kMaxCached + 1) << "bounded";
  EXPECT_NE(cache_.find(mem.data() + 4096 + 10, 1), cache_.end()) << "a region in use is never dropped under a call";
}

TEST_F(RegistrationCacheTest, PinnedAndAllocatedRegionsLeaveOnlyWhenAskedAndIdle) {
  std::vector<char> mem(8192);
  ASSERT_TRUE(cache_.add(mem.data(), mem.size(), true).is_ok());
  EXPECT_EQ(cache_.add(mem.data(), 10, true).status().code(), StatusCode::kBusy);
  auto addr = cache_.allocate(4096);
  ASSERT_TRUE(addr.is_ok());
  auto inside = cache_.find(static_cast<char*>(*addr) + 10, 10);
  ASSERT_NE(inside, cache_.end());
  EXPECT_EQ(inside->first, reinterpret_cast<uintptr_t>(*addr));
  EXPECT_TRUE(inside->second.allocated);
  EXPECT_FALSE(cache_.find(mem.data(), 10)->second.allocated);
  EXPECT_EQ(cache_.release(*addr, false).code(), StatusCode::kNotFound)
      << "allocated memory is freed, not unregistered";
  busy_.insert(reinterpret_cast<uintptr_t>(*addr));
  EXPECT_EQ(cache_.release(*addr, true).code(), StatusCode::kBusy);
  cache_.revoke(reinterpret_cast<uintptr_t>(*addr));
  EXPECT_EQ(cache_.size(), 2u) << "a timed-out call does not take the fabric's memory from its owner";
  busy_.clear();
  EXPECT_TRUE(cache_.release(*addr, true).is_ok());
  cache_.revoke(reinterpret_cast<uintptr_t>(mem.data()));
  EXPECT_EQ(cache_.size(), 0u) << "a registration a target may still use goes when its call timed out";
}

}  // namespace
}  // namespace rfos::client
