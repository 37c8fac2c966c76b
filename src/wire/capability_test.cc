#include "wire/capability.h"

#include <gtest/gtest.h>

namespace rfos::wire {
namespace {

TEST(Capability, SignVerifyAndRefuse) {
  std::string secret(32, 's');
  std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(secret.data()), secret.size());
  Capability cap{Uuid::random(), Uuid::random(), Uuid::random(), Capability::kRead | Capability::kWrite, 5000};
  std::string token = encode_capability(cap, key);
  ASSERT_EQ(token.size(), Capability::kEncodedBytes);
  auto ok = verify_capability(token, key, 4999);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->pool, cap.pool);
  EXPECT_EQ(ok->cont, cap.cont);
  EXPECT_EQ(ok->rights, cap.rights);
  EXPECT_EQ(verify_capability(token, key, 5000).status().code(), StatusCode::kPermissionDenied);  // expired
  std::string other(32, 'o');
  EXPECT_EQ(verify_capability(token, {reinterpret_cast<const uint8_t*>(other.data()), 32}, 1).status().code(),
            StatusCode::kPermissionDenied);
  for (size_t i = 0; i < token.size(); ++i) {  // any flipped bit is refused
    std::string bad = token;
    bad[i] ^= 1;
    EXPECT_FALSE(verify_capability(bad, key, 1).is_ok()) << "byte " << i;
  }
  EXPECT_EQ(verify_capability(token.substr(1), key, 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rfos::wire
