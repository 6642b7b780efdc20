// A Channel is one directed link between two ranks (tensorpipe's Channel, gloo's Pair, one way),
// held as two ends in two processes: ChannelOut on the sending rank, ChannelIn on the receiving
// one. Each end owns everything of its link on its side: the sockets, the link model's stamping and
// shaping, framing, its half of every codec pair (the encoders at the sending end, the decoders at
// the receiving end, each made at its first use under a key both ends derive alike) and the
// link's statistics. The pipeline transport (runtime/comm/transport.h) and the replicas' exchange
// (runtime/dp/dp.h) only route: a message goes out on the peer's ChannelOut and comes in on its
// ChannelIn.
//   in   peer -> this rank: a PULL socket this rank binds (CURVE server admitting only the peer's
//        key across hosts; ZMQ_MAXMSGSIZE), read through a ShapedReceiver (the latency and jitter
//        a receiver adds itself; serial_fifo's billing), messages taken by key: one that arrives
//        ahead of its turn waits in the stash, one the caller calls a slip is an error naming both
//        keys;
//   out  this rank -> peer: a PUSH socket to the peer's PULL, written through a ShapedSender (the
//        link's rate, latency, trace; paced in user space or stamped only). Where the kernel
//        carries the link and network.tcp.streams is N > 1, N PUSH sockets, so N TCP connections:
//        every frame is cut into N stripes, one per connection (a 16-byte stripe header: "SPST",
//        index, count, sequence), and the receiving end joins them before reading it.
// Frames travel as ZeroMQ messages that own their bytes (frameMessage): never copied on this side
// (a striped frame is copied once into its stripes).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
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

// An encoded frame as a ZeroMQ message that owns the bytes (freed once no message refers to them).
zmq::message_t frameMessage(compression::Bytes&& frame);

// One-way times the receiving end observed: delivery minus the sender's send stamp, both on the
// host's CLOCK_MONOTONIC (same host). min = +inf / max = 0 when nothing arrived.
struct DelayObserved {
  double minS = 1e300, maxS = 0;
  int64_t messages = 0;
  void add(double d);
  void merge(const DelayObserved& o);
};

// What one end of a link did since its statistics were last taken. Bytes by message kind
// (compression::MessageKind): raw = 4 x values, wire = frame bytes.
struct LinkStats {
  static constexpr int kKinds = 8;
  std::array<int64_t, kKinds> raw{}, wire{};
  double encodeS = 0, decodeS = 0, waitS = 0;  // waitS: blocked sending, or waiting to receive
  DelayObserved delay;                         // the receiving end's
  int64_t rawOf(compression::MessageKind k) const { return raw[static_cast<size_t>(k)]; }
  int64_t wireOf(compression::MessageKind k) const { return wire[static_cast<size_t>(k)]; }
  void add(const LinkStats& o);
};

// An end's half of its codec pairs: the codec of each key, made at its first use from a spec and
// an instance name ("r<rank>-fwd-send", ...; file-backed codecs derive their files from it).
class CodecHalf {
 public:
  compression::Codec& get(const std::string& key, const std::string& spec,
                          const std::string& instance);
  // The same, naming the instance (instance() -> std::string) only when the codec is made: a
  // message's lookup builds no strings but its key.
  template <typename Name, std::enable_if_t<std::is_invocable_v<Name>, int> = 0>
  compression::Codec& get(const std::string& key, const std::string& spec, Name&& instance) {
    if (const auto it = codecs_.find(key); it != codecs_.end()) return *it->second;
    return get(key, spec, std::string(instance()));
  }
  const std::map<std::string, std::unique_ptr<compression::Codec>>& all() const { return codecs_; }

 private:
  std::map<std::string, std::unique_ptr<compression::Codec>> codecs_;
};

struct ChannelInOptions {
  int peer = 0;                              // the sending rank
  std::string bindHost = "127.0.0.1";        // where the PULL socket binds
  const SocketSecurity* security = nullptr;  // across hosts: CURVE (nullptr: plain, one host)
  int64_t maxMessageBytes = -1;              // ZMQ_MAXMSGSIZE (-1: no limit)
  ListenGuard* guard = nullptr;  // watches the socket (handshake timeout, cap, refusals)
  double maxAheadS = 0;  // refuse arrivals stamped further ahead (the receive timeout; 0: none)
  uint64_t receiverSeed = 2;  // of the jitter a receiver adds itself
};

// The receiving end of the link peer -> this rank.
class ChannelIn {
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

  ChannelIn(zmq::context_t& ctx, const ChannelInOptions& opt);  // binds the socket
  int peer() const { return opt_.peer; }
  // Where the peer's ChannelOut connects.
  const std::string& endpoint() const { return endpoint_; }
  // The delay and jitter the receiver adds itself (`in`, the link peer -> this rank), and what the
  // sender leaves unstamped billed on `inbound` (this rank's part of the model, shared by its
  // inbound links; nullptr: nothing to bill).
  void connect(const LinkEntry& in, emulator::LinkModel* inbound);

  // Takes the first message `judge` calls kTake, from the stash or else the socket, waiting up to
  // timeoutS in all; a kStash one waits in the stash for a later take, a kSlip one is returned
  // (slip = true). Nothing when the time is up. The wait and the taken frame's one-way time go to
  // the link's statistics.
  std::optional<Received> take(const std::function<Verdict(const compression::FrameHeader&)>& judge,
                               double timeoutS);
  size_t stashed() const { return stash_.size(); }
  // Decodes a frame of this link (header parsed at payloadAt) with the decoder `key` into out, the
  // time to the statistics; at most maxElements values (else an error).
  void decode(compression::Codec& decoder, const compression::FrameHeader& h, const uint8_t* bytes,
              size_t payloadAt, const compression::CodecContext& ctx, std::vector<float>& out,
              int64_t maxElements);
  CodecHalf& decoders() { return decoders_; }
  const CodecHalf& decoders() const { return decoders_; }
  LinkStats takeStats();

 private:
  // A frame's stripes as they come in (by sequence number).
  struct Stripes {
    std::vector<emulator::ShapedMessage> parts;
    int got = 0;
  };
  // A received message that is a stripe goes to its frame's stripes; returns the whole frame once
  // all have come (else nothing). Any other message comes back as it is.
  std::optional<emulator::ShapedMessage> joinStripes(emulator::ShapedMessage m);
  // What incomplete frames may hold (see channel.cc).
  size_t maxPartialBytes() const;

  ChannelInOptions opt_;
  std::unique_ptr<zmq::socket_t> pull_;
  std::unique_ptr<emulator::ShapedReceiver> receiver_;
  std::string endpoint_;
  std::deque<Received> stash_;  // arrived ahead of their turn
  std::map<uint64_t, Stripes> stripes_;
  // Bounds on frames not yet whole, so that a peer cannot make this rank hold memory without end:
  // a frame comes in at most maxStripes_ stripes (network.tcp.streams of the link), at most
  // kMaxPartialFrames frames are incomplete at a time, holding at most maxPartialBytes().
  static constexpr size_t kMaxPartialFrames = 1024;
  int maxStripes_ = 1;
  size_t partialBytes_ = 0;
  CodecHalf decoders_;
  LinkStats stats_;
};

// The sending end of the link this rank -> peer.
class ChannelOut {
 public:
  ChannelOut(int peer, const SocketSecurity* security) : peer_(peer), security_(security) {}
  // Writes the link's draw log when SLOWPIPE_LINK_DRAWS asks (emulator/link.h).
  ~ChannelOut();
  int peer() const { return peer_; }
  // Connects to the peer's ChannelIn endpoint, paced and stamped as `out` (the link this rank ->
  // peer) says (none: the kernel paces the rate, only stamp).
  void connect(zmq::context_t& ctx, const std::string& peerEndpoint, const LinkEntry& out,
               uint64_t senderSeed);
  bool connected() const { return !senders_.empty(); }
  void setTraceOrigin(double origin);

  // Encodes numelOf(h.shape) floats at x with `encoder` into a frame with header h (the time to
  // the statistics). A NonFiniteError from the encoder goes to the caller.
  zmq::message_t encode(compression::Codec& encoder, const float* x,
                        const compression::FrameHeader& h, const compression::CodecContext& ctx);
  // Sends one frame of `kind` carrying `raw` fp32 bytes (bytes and the seconds it blocked on the
  // emulated link's queue limit to the statistics).
  void send(zmq::message_t frame, compression::MessageKind kind, int64_t raw);
  CodecHalf& encoders() { return encoders_; }
  const CodecHalf& encoders() const { return encoders_; }
  LinkStats takeStats();

 private:
  // Sends `frame` cut into one stripe per outbound connection.
  void sendStriped(zmq::message_t frame);

  int peer_, self_ = -1;  // self_: this rank (the link's source), once connected
  const SocketSecurity* security_;
  std::vector<std::unique_ptr<zmq::socket_t>> pushes_;  // one per stream
  std::vector<std::unique_ptr<emulator::ShapedSender>> senders_;
  uint64_t stripeSeq_ = 0;
  CodecHalf encoders_;
  LinkStats stats_;
};

}  // namespace slowpipe::runtime
