// Stage transport: a stage's messages to and from its pipeline peers, routed onto Channels.
//
// Protocol. One Channel (runtime/comm/channel.h) per directed link with a peer rank: its
// ChannelOut here carries what this rank sends the peer, its ChannelIn what the peer sends here;
// the previous and the next stage are routes to a peer's channels (with interleaved model chunks
// the pipeline is a ring, and with two stages both routes lead to the one pair of channels of that
// peer, which so carry, and are shaped as, its two links). Every message is an emulator Envelope +
// a compression Frame. Each channel end holds its half of one codec pair per (direction, chunk)
// (the sending end the encoder, the receiving end the decoder, keyed "fwd/c<chunk>" /
// "bwd/c<chunk>"): the forward codec carries activations across a virtual-stage boundary
// b -> b + 1, the backward codec their gradients b + 1 -> b, and `chunk` is the model chunk of b's
// side (protocol::boundaryChunk; 0 with one chunk per stage, which is one pair per direction).
// Evaluation activations (kEval) and control scalars (kControl) travel uncompressed ("plain"). A
// receiver takes the message it expects by key (kind, step, micro-batch, chunk; the frame carries
// the chunk): one that arrives ahead of its turn waits in its channel's stash (an older step's
// message is a protocol slip, an error), then decodes. Codec instances are named
// "r<rank>-<fwd|bwd>-<send|recv>" (chunk c > 0 adds "-c<c>"; files of file-backed codecs derive
// from it); ef's residual key is "<fwd|bwd>/mb<micro-batch>" within its codec instance.
// A non-finite value in a tensor to send stops the run with a message naming step, stage and
// micro-batch (NonFiniteError from the frame encoder).
#pragma once

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "compression/codec.h"
#include "compression/frame.h"
#include "emulator/link.h"
#include "emulator/shaped_socket.h"
#include "runtime/comm/channel.h"

namespace slowpipe::runtime {

struct SocketSecurity;  // runtime/launch/security.h
class ListenGuard;      // runtime/launch/listen_guard.h

struct Tensor32 {  // a float tensor as the transport sees it
  compression::Shape shape;
  std::vector<float> data;
  std::vector<int64_t> exampleIds;
};

// Bytes and time spent by one stage, summed over its channels; reset each step. fromPrev /
// fromNext: the one-way times of the link from the previous / the next stage's rank (with a ring
// of two stages, one link: both say the same).
struct TransportStats {
  int64_t fwdRaw = 0, fwdWire = 0, bwdRaw = 0, bwdWire = 0;
  double encodeS = 0, decodeS = 0, waitS = 0;
  DelayObserved fromPrev, fromNext;
};

struct TransportOptions {
  // rank: the process (names codec instances and frames); stage: its place in the pipeline. Its
  // links come with the peer table (connect; runtime/comm/link_table.h).
  int rank = 0, stage = 0, stages = 1;
  std::string forwardCodec = "none", backwardCodec = "none";
  std::string bindPrevHost = "127.0.0.1",
              bindNextHost = "127.0.0.1";  // addresses of the PULL sockets
  double recvTimeoutS = 120;
  // Runs across hosts: CURVE on every socket, each PULL admitting only its peer's key.
  // nullptr: plain sockets (one host).
  const SocketSecurity* security = nullptr;
  ListenGuard* guard = nullptr;  // watches every socket it binds (runtime/launch/listen_guard.h)
  // ZMQ_MAXMSGSIZE of the sockets this rank binds (largestFrameBytes; -1: no limit).
  int64_t maxMessageBytes = -1;
  // The ranks of the previous and the next stage (runtime/exec/protocol.h pipelinePeer; -1: none).
  int prevRank = -1, nextRank = -1;
  int prevStage = -1, nextStage = -1;  // their stages (with a ring: S-1 before 0, 0 after S-1)
};

// The codec context of one pipeline message (direction, step, epoch, micro-batch, key):
// its sender and its receiver both build it here, so a codec sees the same context at both ends.
compression::CodecContext messageContext(bool forward, int64_t step, int epoch, int mb);

class StageTransport {
 public:
  StageTransport(zmq::context_t& ctx, TransportOptions opt);
  // Where each peer that sends to this rank must connect: {"<peer rank>": "tcp://..."}.
  nlohmann::json endpoints() const;
  // Connects to the peers' PULL endpoints for this rank ({"<peer rank>": "tcp://..."}), each
  // channel shaped as the rank's links say (its peer table's "links").
  void connect(const nlohmann::json& to, const RankLinks& links);

  // Sends numelOf(shape) floats at data to the next (toNext=true) or previous stage (`chunk`: the
  // model chunk of the boundary's lower side). The values are encoded straight from the caller's
  // memory and the frame is handed to ZeroMQ without a copy.
  void send(bool toNext, compression::MessageKind kind, int64_t step, int epoch, int mb,
            const float* data, const compression::Shape& shape,
            const std::vector<int64_t>& exampleIds, int chunk = 0);
  // Receives the message `kind` for (step, mb, chunk) from the previous (fromPrev=true) or next
  // stage (taking it from the channel's stash if it came ahead of its turn) and decodes it.
  Tensor32 recv(bool fromPrev, compression::MessageKind kind, int64_t step, int epoch, int mb,
                int chunk = 0);

  // Time 0 of the links' bandwidth traces (the run's common start, host monotonic clock).
  void setTraceOrigin(double origin);

  TransportStats takeStats();
  // Digest of every forward (activation) or backward (gradient) codec's state, senders' or
  // receivers', over all channels in (peer, chunk) order.
  uint64_t codecDigest(bool forward, bool sender) const;

 private:
  ChannelOut& out(bool next);
  ChannelIn& in(bool prev);
  // The half of (direction, chunk)'s codec pair at one end, made at its first use: "r<rank>-<fwd|
  // bwd>-<send|recv>", plus "-c<chunk>" past chunk 0.
  compression::Codec& codec(CodecHalf& half, bool encoder, bool forward, int chunk);
  TransportOptions opt_;
  zmq::context_t& ctx_;
  std::map<int, std::unique_ptr<ChannelIn>> in_;    // by peer rank: the links peer -> this rank
  std::map<int, std::unique_ptr<ChannelOut>> out_;  // the links this rank -> peer
  // The receiving part of the inbound links' model (serial_fifo: this rank's inbound wire), shared
  // by them; none where the sender stamps every message or the kernel paces.
  std::unique_ptr<emulator::LinkModel> inbound_;
};

}  // namespace slowpipe::runtime
