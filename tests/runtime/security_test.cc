// CURVE sockets as the workers use them (runtime/security.h), in one process over TCP loopback:
// a server admits exactly the rank it takes frames from, refuses other keys, drops frames above
// the run's largest legal frame; keys derived from a secret are the same for every holder.
#include "runtime/security.h"

#include <gtest/gtest.h>

#include <chrono>

namespace slowpipe::runtime {
namespace {

bool receives(zmq::socket_t& s, std::string* got, int ms) {
  zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  zmq::message_t m;
  while (std::chrono::steady_clock::now() < until) {
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    if (s.recv(m, zmq::recv_flags::dontwait)) {
      *got = m.to_string();
      return true;
    }
  }
  return false;
}

TEST(SecurityTest, ServerAdmitsOnlyItsPeerAndFramesUpToTheLimit) {
  zmq::context_t ctx(1);
  CurveGate gate(ctx);
  SocketSecurity server, peer, stranger;
  server.own = newCurveKeyPair();
  peer.own = newCurveKeyPair();
  stranger.own = newCurveKeyPair();
  for (SocketSecurity* s : {&server, &peer, &stranger}) {
    s->rankKeys = {{0, server.own.publicKey}, {1, peer.own.publicKey}};
    s->gate = &gate;
  }
  server.maxMessageBytes = 1000;
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  server.server(pull, 1);  // takes frames from rank 1 only
  pull.bind("tcp://127.0.0.1:*");
  const std::string ep = pull.get(zmq::sockopt::last_endpoint);

  zmq::socket_t rogue(ctx, zmq::socket_type::push);
  rogue.set(zmq::sockopt::linger, 0);
  stranger.client(rogue, 0);  // knows the server's key, has a key of its own
  rogue.connect(ep);
  (void)rogue.send(zmq::str_buffer("injected"), zmq::send_flags::dontwait);
  std::string got;
  EXPECT_FALSE(receives(pull, &got, 1000)) << "a frame from an unadmitted key arrived: " << got;
  EXPECT_GE(gate.refused(), 1);
  ASSERT_FALSE(gate.refusals().empty());
  EXPECT_NE(gate.refusals()[0].find("from-rank-1"), std::string::npos) << gate.refusals()[0];

  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  peer.client(push, 0);
  push.connect(ep);
  push.send(zmq::str_buffer("hello from rank 1"), zmq::send_flags::none);
  ASSERT_TRUE(receives(pull, &got, 5000));
  EXPECT_EQ(got, "hello from rank 1");
  // Above the limit: dropped with the connection (the reader never sees it).
  push.send(zmq::buffer(std::string(5000, 'x')), zmq::send_flags::none);
  EXPECT_FALSE(receives(pull, &got, 1000)) << "an oversized frame of " << got.size() << " bytes arrived";
}

TEST(SecurityTest, KeysFromASecretAreTheSameForEveryHolderAndOnlyForThem) {
  const CurveKeyPair a = curveKeyPairFromSecret("the shared secret of a run", "rendezvous/server");
  const CurveKeyPair b = curveKeyPairFromSecret("the shared secret of a run", "rendezvous/server");
  EXPECT_EQ(a.publicKey, b.publicKey);
  EXPECT_EQ(a.secretKey, b.secretKey);
  EXPECT_EQ(a.publicKey.size(), 40u);
  EXPECT_NE(curveKeyPairFromSecret("the shared secret of a run", "rendezvous/client").publicKey, a.publicKey);
  EXPECT_NE(curveKeyPairFromSecret("another secret altogether", "rendezvous/server").publicKey, a.publicKey);
  EXPECT_NE(newCurveKeyPair().publicKey, newCurveKeyPair().publicKey);
}

}  // namespace
}  // namespace slowpipe::runtime
