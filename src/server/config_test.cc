#include "server/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "engine/engine_testing.h"

namespace rfos::server {
namespace {

std::string write_file(const std::string& dir, const std::string& text) {
  std::string path = dir + "/rfos.yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(Config, DefaultsFileAndValidation) {
  ServerConfig c;
  EXPECT_TRUE(validate(c).is_ok());
  EXPECT_EQ(c.control_addr, "");  // no TCP listener unless asked for
  EXPECT_EQ(c.control_socket, kDefaultControlSocket);
  engine::testing::TempDir dir;
  ASSERT_TRUE(load_config_file(write_file(dir.path(),
                                          "provider: ofi+shm\ntargets: 3\nmedia_threads: 8\npayload_timeout_ms: 5000\n"
                                          "session_buffer_bytes: 8388608\nadmins: [alice, ops.bot]\n"
                                          "control_socket: /run/x/c.sock\nlog_level: debug\n"),
                               &c)
                  .is_ok());
  EXPECT_EQ(c.provider, "ofi+shm");
  EXPECT_EQ(c.targets, 3u);
  EXPECT_EQ(c.media_threads, 8u);
  EXPECT_EQ(c.payload_timeout_ms, 5000u);
  EXPECT_EQ(c.session_buffer_bytes, 8u << 20);
  EXPECT_EQ(c.admins, (std::vector<std::string>{"alice", "ops.bot"}));
  EXPECT_EQ(c.control_socket, "/run/x/c.sock");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_TRUE(validate(c).is_ok());
  EXPECT_EQ(c.data_dir, "/var/lib/rfos");  // untouched keys keep their defaults

  ServerConfig d;
  Status s = load_config_file(write_file(dir.path(), "provder: ucx+tcp\n"), &d);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("provder"), std::string::npos);
  EXPECT_EQ(load_config_file(write_file(dir.path(), "targets: [1, 2\n"), &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load_config_file(write_file(dir.path(), "targets: many\n"), &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load_config_file(dir.path() + "/missing.yaml", &d).code(), StatusCode::kNotFound);

  d = ServerConfig{};
  d.provider = "carrier+pigeon";
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d = ServerConfig{};
  d.control_addr = "no-port";
  d.insecure = true;
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d = ServerConfig{};
  d.control_addr = "127.0.0.1:10001";  // TCP without TLS is refused unless said insecure
  s = validate(d);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("insecure"), std::string::npos) << s.message();
  d.insecure = true;
  EXPECT_TRUE(validate(d).is_ok());
  d.tls_cert = "cert.pem";
  d.tls_key = "key.pem";
  d.tls_ca = "ca.pem";
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);  // TLS and insecure at once
  d.insecure = false;
  EXPECT_TRUE(validate(d).is_ok());
  d.tls_ca.clear();  // TLS that would not check its clients
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d = ServerConfig{};
  d.control_socket.clear();  // no listener at all
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d = ServerConfig{};
  d.tls_cert = "cert.pem";
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);  // a certificate without its key
  d = ServerConfig{};
  d.log_level = "loud";
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d = ServerConfig{};
  d.media_threads = 0;
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d = ServerConfig{};
  d.payload_timeout_ms = 10;  // would give up on payloads still on their way
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d = ServerConfig{};
  d.session_buffer_bytes = 4096;  // less than one 1 MiB request
  EXPECT_EQ(validate(d).code(), StatusCode::kInvalidArgument);
  d.session_buffer_bytes = 0;  // no limit
  EXPECT_TRUE(validate(d).is_ok());
}

}  // namespace
}  // namespace rfos::server
