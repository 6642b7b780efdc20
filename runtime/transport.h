// Stage transport: framed, codec-compressed, shaped channels between neighbouring stages.
//
// Protocol. Each stage binds two PULL sockets, one for messages from the previous stage and one
// for messages from the next, and connects one PUSH socket to each neighbour's matching PULL.
// Every message is an emulator Envelope + a compression Frame. Per direction and per link there is
// one codec pair (sender encodes, receiver decodes): the forward codec carries activations to the
// next stage, the backward codec carries activation gradients to the previous one. Evaluation
// activations (kEval) and control scalars (kControl) travel uncompressed. Receivers parse each frame
// once, check its kind, step and micro-batch against what the schedule expects (a protocol slip
// is an error), then decode. Codec instances are named "r<rank>-<fwd|bwd>-<send|recv>" (files of
// file-backed codecs derive from it); ef's residual key is "<fwd|bwd>/mb<micro-batch>".
// A non-finite value in a tensor to send stops the run with a message naming step, stage and
// micro-batch (NonFiniteError from the frame encoder).
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "compression/codec.h"
#include "compression/frame.h"
#include "emulator/link.h"
#include "emulator/shaped_socket.h"

namespace slowpipe::runtime {

struct SocketSecurity;  // runtime/security.h

struct Tensor32 {  // a float tensor as the transport sees it
  compression::Shape shape;
  std::vector<float> data;
  std::vector<int64_t> exampleIds;
};

// One-way times the receiver observed: delivery minus the sender's send stamp, both on the
// host's CLOCK_MONOTONIC (same host). min = +inf / max = 0 when nothing arrived.
struct DelayObserved {
  double minS = 1e300, maxS = 0;
  int64_t messages = 0;
  void add(double d) {
    minS = std::min(minS, d);
    maxS = std::max(maxS, d);
    ++messages;
  }
};

// Bytes and time spent by one stage; reset each step.
struct TransportStats {
  int64_t fwdRaw = 0, fwdWire = 0, bwdRaw = 0, bwdWire = 0;
  double encodeS = 0, decodeS = 0, waitS = 0;
  DelayObserved fromPrev, fromNext;
};

struct TransportOptions {
  // rank: the process (names codec instances and frames); stage: its place in the pipeline (which
  // neighbours it has, which links of the topology its messages take).
  int rank = 0, stage = 0, stages = 1;
  std::string forwardCodec = "none", backwardCodec = "none";
  emulator::Topology topology;
  bool kernelPacesRate = false;     // tc backend: the kernel shapes the rate
  // tc backend without netem: the receiver adds latency/jitter itself, per direction: prev* to
  // what arrives from the previous stage (link r-1 -> r), next* to what arrives from the next
  // stage (link r+1 -> r).
  double prevLatencyS = 0, prevJitterS = 0, nextLatencyS = 0, nextJitterS = 0;
  bool serialFifo = false;  // network.model serial_fifo (user backend): one inbound FIFO per stage
  std::string bindPrevHost = "127.0.0.1", bindNextHost = "127.0.0.1";  // addresses of the PULL sockets
  double recvTimeoutS = 120;
  // Runs across hosts: CURVE on every socket, each PULL admitting only its neighbour's key
  // (prevRank / nextRank: the neighbours' ranks). nullptr: plain sockets (one host).
  const SocketSecurity* security = nullptr;
  // ZMQ_MAXMSGSIZE of the sockets this rank binds (largestFrameBytes; -1: no limit).
  int64_t maxMessageBytes = -1;
  int prevRank = -1, nextRank = -1;
};

// The codec context of one pipeline message (direction, step, epoch, micro-batch, key): its sender
// and its receiver both build it here, so a codec sees the same context at both ends.
compression::CodecContext messageContext(bool forward, int64_t step, int epoch, int mb);

class StageTransport {
 public:
  StageTransport(zmq::context_t& ctx, TransportOptions opt);
  // Endpoints the neighbours must connect to: {"from_prev": ..., "from_next": ...} (empty if none).
  std::string fromPrevEndpoint() const { return fromPrevEp_; }
  std::string fromNextEndpoint() const { return fromNextEp_; }
  // Connects to the neighbours' PULL endpoints (prevFromNext = previous stage's from_next; its
  // rank prevRank, likewise the next stage's).
  void connect(const std::string& prevFromNext, const std::string& nextFromPrev, int prevRank, int nextRank);

  // Sends numelOf(shape) floats at data to the next (toNext=true) or previous stage. The values
  // are encoded straight from the caller's memory and the frame is handed to ZeroMQ without a copy.
  void send(bool toNext, compression::MessageKind kind, int64_t step, int epoch, int mb, const float* data,
            const compression::Shape& shape, const std::vector<int64_t>& exampleIds);
  // Receives the next message from the previous (fromPrev=true) or next stage, checks it is `kind`
  // for (step, mb), decodes it.
  Tensor32 recv(bool fromPrev, compression::MessageKind kind, int64_t step, int epoch, int mb);

  TransportStats takeStats();
  uint64_t codecDigest(bool forward, bool sender) const;

 private:
  struct Peer {
    std::unique_ptr<zmq::socket_t> push;
    std::unique_ptr<emulator::ShapedSender> sender;
    std::unique_ptr<compression::Codec> encoder;  // codec for what we send to this peer
    std::unique_ptr<compression::Codec> decoder;  // codec for what we receive from this peer
    std::unique_ptr<compression::Codec> plainEncoder, plainDecoder;  // kEval / kControl
  };
  TransportOptions opt_;
  zmq::context_t& ctx_;
  zmq::socket_t fromPrev_, fromNext_;
  std::unique_ptr<emulator::ShapedReceiver> rxPrev_, rxNext_;
  emulator::SerialFifo fifo_;  // serial_fifo: this stage's one inbound wire
  std::string fromPrevEp_, fromNextEp_;
  Peer prev_, next_;
  int prevRank_ = -1, nextRank_ = -1;
  TransportStats stats_;
};

}  // namespace slowpipe::runtime
