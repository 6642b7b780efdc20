// A Channel: this rank's two directed links with one peer rank (tensorpipe's Channel, gloo's
// Pair), the one wire under the pipeline transport (runtime/comm/transport.h) and the replicas'
// exchange (runtime/dp/dp.h), which only route to it by rank and frame what they send.
//   inbound  peer -> this rank: a PULL socket this rank binds (CURVE server admitting only the
//            peer's key across hosts; ZMQ_MAXMSGSIZE), read through a ShapedReceiver (the latency
//            and jitter a receiver adds itself; serial_fifo's billing), messages taken by key: one
//            that arrives ahead of its turn waits in the channel's stash, one the caller calls a
//            slip is an error naming both keys;
//   outbound this rank -> peer: a PUSH socket to the peer's PULL, written through a ShapedSender
//            (the link's rate, latency, trace; paced in user space or stamped only). Where the
//            kernel carries the link and network.tcp.streams is N > 1, N PUSH sockets, so N TCP
//            connections: every frame is cut into N stripes, one per connection (a 16-byte stripe
//            header: "SPST", index, count, sequence), and the receiver joins them before reading
//            it.
// Frames travel as ZeroMQ messages that own their bytes (frameMessage): never copied on this side
// (a striped frame is copied once into its stripes).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "compression/codec.h"
#include "compression/frame.h"
#include "emulator/link.h"
#include "emulator/shaped_socket.h"
#include "runtime/comm/link_table.h"

namespace slowpipe::runtime {

struct SocketSecurity;  // runtime/launch/security.h
class ListenGuard;      // runtime/launch/listen_guard.h

struct ChannelOptions {
  int peer = 0;                              // the rank at the other end
  std::string bindHost = "127.0.0.1";        // where the inbound PULL socket binds
  const SocketSecurity* security = nullptr;  // across hosts: CURVE (nullptr: plain, one host)
  int64_t maxMessageBytes = -1;              // ZMQ_MAXMSGSIZE of the inbound socket (-1: no limit)
  ListenGuard* guard = nullptr;  // watches the inbound socket (handshake timeout, cap, refusals)
  double maxAheadS = 0;  // refuse arrivals stamped further ahead (the receive timeout; 0: none)
  uint64_t receiverSeed = 2;  // of the jitter a receiver adds itself
};

// An encoded frame as a ZeroMQ message that owns the bytes (freed once no message refers to them).
zmq::message_t frameMessage(compression::Bytes&& frame);

class Channel {
 public:
  // A received frame, parsed.
  struct Received {
    emulator::ShapedMessage message;
    compression::FrameHeader header;
    size_t payloadAt = 0;
    bool slip = false;  // the judge called it a slip: the caller names it in its error
    const uint8_t* bytes() const { return static_cast<const uint8_t*>(message.payload.data()); }
    double oneWayS() const { return message.deliveredAt - message.envelope.sendTime; }
  };
  // What a receiver makes of a message: the one it waits for, one for a later turn, or a slip.
  enum class Verdict { kTake, kStash, kSlip };

  Channel(zmq::context_t& ctx, const ChannelOptions& opt);  // binds the inbound socket
  // Writes the outbound link's draw log when SLOWPIPE_LINK_DRAWS asks (emulator/link.h).
  ~Channel();
  int peer() const { return opt_.peer; }
  // Where the peer connects to send to this rank.
  const std::string& endpoint() const { return endpoint_; }
  // Connects the channel as the link table says (runtime/comm/link_table.h): `out` (this rank ->
  // peer) to the peer's endpoint, paced and stamped by its model (none: the kernel paces the rate,
  // only stamp); `in` (peer -> this rank): the delay and jitter the receiver adds itself, and what
  // the sender leaves unstamped billed on `inbound` (this rank's part of the model, shared by its
  // inbound links; nullptr: nothing to bill).
  void connect(zmq::context_t& ctx, const std::string& peerEndpoint, const LinkEntry& out,
               const LinkEntry& in, emulator::LinkModel* inbound, uint64_t senderSeed);
  bool connected() const { return !senders_.empty(); }
  void setTraceOrigin(double origin);

  // Sends one frame; returns the seconds it blocked (the emulated link's queue limit).
  double send(zmq::message_t frame);
  // Takes the first message `judge` calls kTake, from the stash or else the socket, waiting up to
  // timeoutS in all; a kStash one waits in the stash for a later take, a kSlip one is returned
  // (slip = true). Nothing when the time is up. *waitedS: the seconds it waited.
  std::optional<Received> take(const std::function<Verdict(const compression::FrameHeader&)>& judge,
                               double timeoutS, double* waitedS);
  size_t stashed() const { return stash_.size(); }

 private:
  // A frame's stripes as they come in (by sequence number).
  struct Stripes {
    std::vector<emulator::ShapedMessage> parts;
    int got = 0;
  };
  // Sends `frame` cut into one stripe per outbound connection.
  void sendStriped(zmq::message_t frame);
  // A received message that is a stripe goes to its frame's stripes; returns the whole frame once
  // all have come (else nothing). Any other message comes back as it is.
  std::optional<emulator::ShapedMessage> joinStripes(emulator::ShapedMessage m);

  ChannelOptions opt_;
  int self_ = -1;  // this rank (the outbound link's source), once connected
  std::vector<std::unique_ptr<zmq::socket_t>> pushes_;  // one per stream
  std::unique_ptr<zmq::socket_t> pull_;
  std::vector<std::unique_ptr<emulator::ShapedSender>> senders_;
  std::unique_ptr<emulator::ShapedReceiver> receiver_;
  std::string endpoint_;
  std::deque<Received> stash_;  // arrived ahead of their turn
  uint64_t stripeSeq_ = 0;
  std::map<uint64_t, Stripes> stripes_;
  // Bounds on frames not yet whole, so that a peer cannot make this rank hold memory without end:
  // a frame comes in at most maxStripes_ stripes (network.tcp.streams of the inbound link), at
  // most kMaxPartialFrames frames are incomplete at a time, holding at most maxPartialBytes().
  static constexpr size_t kMaxPartialFrames = 1024;
  int maxStripes_ = 1;
  size_t partialBytes_ = 0;
  size_t maxPartialBytes() const;
};

}  // namespace slowpipe::runtime
