// The agent's YAML config: every key read, tenants with keys and limits, typos and bad values refused; CPU lists.
#include <gtest/gtest.h>

#include <fstream>

#include "agent/agent.h"
#include "engine/engine_testing.h"

namespace rfos::agent {
namespace {

class AgentConfigTest : public ::testing::Test {
 protected:
  Status load(const std::string& yaml, AgentConfig* c) {
    std::string path = dir_.path() + "/agent.yaml";
    std::ofstream(path) << yaml;
    return load_agent_config(path, c);
  }
  engine::testing::TempDir dir_;
};

TEST_F(AgentConfigTest, ReadsEveryKeyAndTheTenants) {
  AgentConfig c;
  ASSERT_TRUE(
      load("control_address: unix:/x.sock\nprovider: ucx+shm\nlisten: /run/a.sock\ncpus: \"1\"\n"
           "max_buffer_bytes: 1048576\nmax_apps: 3\nmax_apps_per_user: 2\ntimeout_ms: 100\nstate_dir: /s\nagent_id: 9\n"
           "tenants:\n  - name: a\n    users: [alice, \"1001\"]\n    key_file: /k\n"
           "    qos: {iops: 100, bytes_per_s: 2000, burst_ios: 5, burst_bytes: 4096}\n"
           "  - name: b\n    groups: [ml]\n",
           &c)
          .is_ok());
  EXPECT_EQ(c.control_address, "unix:/x.sock");
  EXPECT_EQ(c.provider, "ucx+shm");
  EXPECT_EQ(c.listen, "/run/a.sock");
  EXPECT_EQ(c.cpus, "1");
  EXPECT_EQ(c.max_buffer_bytes, 1048576u);
  EXPECT_EQ(c.max_apps, 3u);
  EXPECT_EQ(c.max_apps_per_user, 2u);
  EXPECT_EQ(c.timeout_ms, 100u);
  EXPECT_EQ(c.state_dir, "/s");
  EXPECT_EQ(c.agent_id, 9u);
  ASSERT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.tenants[0].users, (std::vector<std::string>{"alice", "1001"}));
  EXPECT_EQ(c.tenants[0].key_file, "/k");
  EXPECT_EQ(c.tenants[0].qos.iops, 100);
  EXPECT_EQ(c.tenants[0].qos.bytes_per_s, 2000);
  EXPECT_EQ(c.tenants[0].qos.burst_ios, 5);
  EXPECT_EQ(c.tenants[0].qos.burst_bytes, 4096);
  EXPECT_EQ(c.tenants[1].groups, (std::vector<std::string>{"ml"}));
  EXPECT_FALSE(c.tenants[1].qos.limited());
}

TEST_F(AgentConfigTest, TyposAndBadValuesAreRefused) {
  AgentConfig c;
  EXPECT_EQ(load("listne: /x\n", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load("tenants:\n  - name: a\n    user: [x]\n", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load("tenants:\n  - name: a\n    qos: {iop: 5}\n", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load("tenants:\n  - name: a\n    qos: {iops: -5}\n", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load("tenants:\n  - users: [x]\n", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load("max_apps: many\n", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load("[1, 2]\n", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load_agent_config(dir_.path() + "/missing.yaml", &c).code(), StatusCode::kNotFound);
  EXPECT_TRUE(load("", &c).is_ok());
}

TEST(PinToCpus, RefusesWhatIsNotACpuList) {
  for (const char* bad : {"", "x", "1-", "3-1", "1,,2", "99999"})
    EXPECT_EQ(pin_to_cpus(bad).code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_TRUE(pin_to_cpus("0").is_ok());
}

}  // namespace
}  // namespace rfos::agent
