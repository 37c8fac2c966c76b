// The libfabric worker's peer table is bounded: a flood of made-up addresses (every message names its sender's
// address, and a hostile peer may name any) costs at most kMaxPeers entries; the idlest are forgotten, and a
// forgotten peer's handle fails instead of reaching whoever took its place. And a sender must prove the address
// its envelopes name: a hostile endpoint, raw libfabric writing envelopes as docs/wire-format.md gives them,
// cannot be heard as another peer, nor answer for one. Loopback only.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "common/coding.h"

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

// A bare libfabric endpoint on the same provider as the workers, sending whatever bytes it is given.
class RawEndpoint {
 public:
  ~RawEndpoint() {
    if (ep_) fi_close(&ep_->fid);
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fi_freeinfo(info_);
  }
  bool open() {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
    int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    if (rc || fi_fabric(info_->fabric_attr, &fabric_, nullptr) || fi_domain(fabric_, info_, &domain_, nullptr) ||
        fi_cq_open(domain_, &cq_attr, &cq_, nullptr) || fi_av_open(domain_, &av_attr, &av_, nullptr) ||
        fi_endpoint(domain_, info_, &ep_, nullptr) || fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV) ||
        fi_ep_bind(ep_, &av_->fid, 0) || fi_enable(ep_))
      return false;
    char name[256];
    size_t len = sizeof(name);
    if (fi_getname(&ep_->fid, name, &len)) return false;
    address.assign(name, len);
    recv_buf_.resize(64 * 1024);
    return fi_trecv(ep_, recv_buf_.data(), recv_buf_.size(), nullptr, FI_ADDR_UNSPEC, 0, 0, &recv_ctx_) == 0;
  }
  // Sends `bytes` as an envelope (tag 0) to `peer`, and waits for the send to complete.
  bool send(const std::string& peer, const std::string& bytes, const std::function<void()>& meanwhile) {
    auto known = peers_.find(peer);
    if (known == peers_.end()) {
      fi_addr_t fa = FI_ADDR_UNSPEC;
      if (fi_av_insert(av_, peer.data(), 1, &fa, 0, nullptr) != 1) return false;
      known = peers_.emplace(peer, fa).first;
    }
    fi_context ctx{};
    bool sent = false, failed = false;
    waiting_[&ctx] = {&sent, &failed};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {  // rxm refuses (-FI_EAGAIN) until its connection is up, which progress (a CQ read) moves on
      ssize_t rc = fi_tsend(ep_, bytes.data(), bytes.size(), nullptr, known->second, 0, &ctx);
      if (rc == 0) break;
      if (rc != -FI_EAGAIN || std::chrono::steady_clock::now() > deadline) {
        waiting_.erase(&ctx);
        return false;
      }
      drain();
      meanwhile();
    }
    bool ok = until([&] { return sent || failed; }, meanwhile) && sent;
    waiting_.erase(&ctx);
    return ok;
  }
  // Waits for the next envelope to arrive, progressing `meanwhile`; empty after 10 s.
  std::string receive(const std::function<void()>& meanwhile) {
    if (!until([&] { return received_ > 0; }, meanwhile)) return {};
    std::string got(recv_buf_.data(), received_);
    received_ = 0;
    (void)fi_trecv(ep_, recv_buf_.data(), recv_buf_.size(), nullptr, FI_ADDR_UNSPEC, 0, 0, &recv_ctx_);
    return got;
  }
  std::string address;

 private:
  // Reads what completed: the receive, or a send (waiting_ says whose flags to set).
  void drain() {
    fi_cq_tagged_entry e{};
    ssize_t got = fi_cq_read(cq_, &e, 1);
    void* ctx = e.op_context;
    bool ok = got == 1;
    if (got == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_, &err, 0);
      ctx = err.op_context;
    } else if (got != 1) {
      return;
    }
    if (ctx == &recv_ctx_) {
      received_ = ok ? e.len : 0;
    } else if (auto w = waiting_.find(ctx); w != waiting_.end()) {
      *(ok ? w->second.first : w->second.second) = true;
    }
  }
  bool until(const std::function<bool()>& done, const std::function<void()>& meanwhile) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      drain();
      meanwhile();
    }
    return done();
  }
  std::map<void*, std::pair<bool*, bool*>> waiting_;  // a send in flight -> its done and failed flags
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::map<std::string, fi_addr_t> peers_;
  fi_context recv_ctx_{};
  std::vector<char> recv_buf_;
  size_t received_ = 0;
};

// An envelope as docs/wire-format.md gives it: kind u8 | addr_len u16 | addr | proof [16] | token [16] |
// payload tag u64 | payload length u64 | header.
std::string envelope(uint8_t kind, const std::string& claimed, const std::string& proof, const std::string& header) {
  std::string e;
  put_le<uint8_t>(&e, kind);
  put_le<uint16_t>(&e, static_cast<uint16_t>(claimed.size()));
  e += claimed;
  e += proof;
  e += std::string(16, 't');  // a token for the receiver: kept only from a sender that proved its address
  put_le<uint64_t>(&e, 0);
  put_le<uint64_t>(&e, 0);
  e += header;
  return e;
}

struct Heard {
  std::vector<std::string> headers;
  std::vector<std::string> claimed;  // the address of a sender the target did not know yet
};

TEST(OfiPeers, SendersMustProveTheirAddress) {
  setenv("FI_TCP_IFACE", "lo", 0);
  setenv("FI_NET_IFACE", "lo", 0);
  WorkerOptions target_options;
  target_options.introduced_peers_only = true;
  auto target = Worker::create("ofi+tcp", target_options);
  auto victim = Worker::create("ofi+tcp");
  ASSERT_TRUE(target.is_ok()) << target.status().to_string();
  ASSERT_TRUE(victim.is_ok()) << victim.status().to_string();
  Worker& t = **target;
  Worker& v = **victim;
  Heard at_target, at_victim;
  t.on_message([&](Incoming& in) {
    at_target.headers.emplace_back(in.header);
    if (in.reply_to) {
      (void)t.send(in.reply_to, "answer", {}, [](Status) {});
      return;
    }
    at_target.claimed.emplace_back(in.claimed_address);
    auto h = t.adopt(in);  // as a target does once the request's capability verified
    if (h.is_ok()) (void)t.send(*h, "answer", {}, [](Status) {});
  });
  v.on_message([&](Incoming& in) { at_victim.headers.emplace_back(in.header); });
  auto progress = [&] {
    t.progress();
    v.progress();
  };
  auto until = [&](const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) progress();
    return done();
  };

  // The victim, honest: asks the target for its token, is heard, adopted, and hears the answer.
  auto to_t = v.connect(t.address());
  ASSERT_TRUE(to_t.is_ok()) << to_t.status().to_string();
  ASSERT_TRUE(v.send(*to_t, "from the victim", {}, [](Status) {}).is_ok());
  ASSERT_TRUE(until([&] { return !at_victim.headers.empty(); })) << "the honest exchange did not happen";
  EXPECT_EQ(at_target.headers, std::vector<std::string>{"from the victim"});
  EXPECT_EQ(at_victim.headers, std::vector<std::string>{"answer"});
  EXPECT_EQ(at_target.claimed, std::vector<std::string>{v.address()}) << "the target knew the victim before";

  RawEndpoint hostile;
  ASSERT_TRUE(hostile.open());
  const std::string zeros(16, '\0');
  auto dropped_by = [&](Worker& w, const std::string& to, const std::string& bytes) {
    uint64_t before = w.unproved_dropped();
    if (!hostile.send(to, bytes, progress)) return false;
    return until([&] { return w.unproved_dropped() == before + 1; });
  };
  // Claiming the victim's address, with no proof, with a made-up one: dropped, not heard.
  EXPECT_TRUE(dropped_by(t, t.address(), envelope(0, v.address(), zeros, "as the victim")));
  EXPECT_TRUE(dropped_by(t, t.address(), envelope(0, v.address(), std::string(16, 'p'), "as the victim")));
  // Asking for a token in the victim's name: the answer goes to the victim, who asked nothing and drops it.
  EXPECT_TRUE(dropped_by(v, t.address(), envelope(1, v.address(), zeros, std::string(16, 'n'))));
  // Answering for the target: the victim drops a message that claims the target's address without its proof.
  EXPECT_TRUE(dropped_by(v, v.address(), envelope(0, t.address(), zeros, "a forged answer")));
  // An answer to a proof request nobody made is dropped too.
  EXPECT_TRUE(dropped_by(v, v.address(), envelope(2, t.address(), zeros, std::string(16, 'n'))));
  // Garbage.
  EXPECT_TRUE(dropped_by(t, t.address(), "not an envelope"));
  EXPECT_EQ(at_target.headers, std::vector<std::string>{"from the victim"});
  EXPECT_EQ(at_victim.headers, std::vector<std::string>{"answer"});

  // The same endpoint asking in its own name gets a token, and with it is heard: the checks above failed on
  // the proof, not on the raw envelopes.
  ASSERT_TRUE(hostile.send(t.address(), envelope(1, hostile.address, zeros, std::string(16, 'n')), progress));
  std::string answer = hostile.receive(progress);
  ByteReader r(answer);
  uint8_t kind = 0;
  uint16_t alen = 0;
  std::string_view addr, proof, token, nonce;
  uint64_t tag = 0, plen = 0;
  ASSERT_TRUE(r.get_le(&kind) && r.get_le(&alen) && r.get_bytes(alen, &addr) && r.get_bytes(16, &proof) &&
              r.get_bytes(16, &token) && r.get_le(&tag) && r.get_le(&plen) && r.get_bytes(16, &nonce))
      << "no answer to the proof request";
  EXPECT_EQ(kind, 2);
  EXPECT_EQ(addr, t.address());
  EXPECT_EQ(nonce, std::string(16, 'n'));
  ASSERT_TRUE(hostile.send(t.address(), envelope(0, hostile.address, std::string(token), "proved"), progress));
  ASSERT_TRUE(until([&] { return at_target.headers.size() == 2; }));
  EXPECT_EQ(at_target.headers[1], "proved");
  EXPECT_EQ(at_target.claimed, (std::vector<std::string>{v.address(), hostile.address}));
  // Its token is for its own address only.
  EXPECT_TRUE(dropped_by(t, t.address(), envelope(0, v.address(), std::string(token), "as the victim again")));
  EXPECT_EQ(at_target.headers.size(), 2u);
  // The victim is still heard and answered.
  ASSERT_TRUE(v.send(*to_t, "still here", {}, [](Status) {}).is_ok());
  ASSERT_TRUE(until([&] { return at_victim.headers.size() == 2; }));
  EXPECT_EQ(at_target.headers.size(), 3u);
  EXPECT_EQ(at_target.headers.back(), "still here");
}

}  // namespace
}  // namespace rfos::transport
