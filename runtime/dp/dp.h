// Data parallelism between the replicas of one pipeline stage: the links, the message codecs and
// the two collectives (ring allreduce, sharded parameter server), executed action by action from
// the step's list (runtime/exec/schedule.h: DpBegin, Send/Recv with Peer kReplica, DpEnd).
// Torch-free: a round works on one flat float buffer that the worker packs (gradients, PowerSGD
// factors, the DiLoCo outer gradient) and unpacks.
//
// Wire. One Channel (runtime/comm/channel.h) per directed link with each other replica of the
// stage, so every DP link is its own FIFO with its own user-space shaping (network.dp_links: the
// default link, overrides by replica); the exchange only routes. Messages are compression frames of
// kind kParamGradient whose micro-batch field carries (round, message, chunk): a slip is an error.
// Chunk c of an n-value buffer is [c*n/R, (c+1)*n/R); a message is its chunk as a 1-D tensor {len}
// (quantizers for gradients want scale=group: a channel scale of a 1-D tensor is per value).
//
// Codec pairs, named by what both ends must agree on (their state digests are compared by the
// launcher, key by key). A point-to-point pair is the link's: its encoder at the sending end of
// the channel, its decoder at the receiving end. A frame encoded once for several replicas is
// not one link's: its encoder, and the decoder of the replica that encoded it (which decodes its
// own frame so that it holds what the others hold), are the exchange's own.
//   ring reduce-scatter  "rs/<r>-><r+1>"  r's link to r+1 (ctx.key per chunk, so ef keeps one
//                                          residual per chunk);
//   ring all-gather      "ag/c<c>"        the owner of chunk c encodes it once per round (own);
//                                          every other replica decodes that same frame with the
//                                          decoder of chunk c of the link it came in on, so all
//                                          replicas hold identical values;
//   ps push              "push/<r>-><q>"  r's link to q (ef here: the worker side);
//   ps pull              "pull/c<q>"      server q's average, encoded once (own; ef here: the
//                                          server side), decoded by every replica, q included.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "compression/codec.h"
#include "emulator/link.h"
#include "emulator/shaped_socket.h"
#include "runtime/comm/channel.h"
#include "runtime/dp/gradient_compressor.h"
#include "runtime/exec/protocol.h"
#include "runtime/exec/schedule.h"
#include "runtime/spec/spec.h"

namespace slowpipe::runtime {

struct SocketSecurity;  // runtime/launch/security.h
class ListenGuard;      // runtime/launch/listen_guard.h

// The schedule's view of a run's data parallelism.
DpShape dpShape(const RunSpec& spec);
// Shapes of stage `stage`'s parameters in the order of StageModel::parameters(), without torch
// (runtime/model/model_size.h): what the simulator sizes data-parallel messages by.
std::vector<std::vector<int64_t>> stageParameterShapes(const RunSpec& spec, int stage);
// The parameters one rank of stage `stage` holds and its replicas synchronise: every model chunk's
// (virtual stages stage, stage + S, ...), in chunk order (what GradientSync packs).
std::vector<std::vector<int64_t>> rankParameterShapes(const RunSpec& spec, int stage);
// Values of the flat buffer of DP round `round` on stage `stage` (what GradientSync::pack forms,
// the same at every step that exchanges; GradientCompressor::roundValues of its parameters).
int64_t dpRoundValues(const RunSpec& spec, int stage, int round);
// The codec a round's messages travel with: "none" for exact rounds (qadam's warm-up), else the
// compressor's message codec.
std::string dpRoundCodec(const RunSpec& spec, int64_t step);

// The replicas' links: network.dp_links, or (unset) the pipeline's default link without its
// per-stage overrides.
emulator::Topology dpTopology(const RunSpec& spec);

struct DpOptions {
  int rank = 0, stage = 0, replica = 0, replicas = 1;
  std::string algorithm = "allreduce";
  std::string codec = "none";  // per-message codec spec (its links come with the peer table)
  std::string bindHost = "127.0.0.1";
  double recvTimeoutS = 120;
  const SocketSecurity* security = nullptr;  // across hosts: CURVE, see TransportOptions
  ListenGuard* guard = nullptr;              // watches every socket it binds
  int64_t maxMessageBytes = -1;              // ZMQ_MAXMSGSIZE of the sockets it binds
};

struct DpStats {
  int64_t raw = 0, wire = 0;  // bytes this replica sent (raw: 4 x values)
  double encodeS = 0, decodeS = 0, waitS = 0;
};

class DpExchange {
 public:
  DpExchange(zmq::context_t& ctx, DpOptions opt);
  // {"<q>": endpoint} of the PULL sockets: where replica q must send to reach this one.
  nlohmann::json endpoints() const;
  // peers["<q>"]: replica q's endpoint for messages from this replica; each channel shaped as the
  // rank's links say (its peer table's "links").
  void connect(const nlohmann::json& peers, const RankLinks& links);

  // One round on buf[0, n): DpBegin ... DpEnd. After end(), every replica's buf holds the same
  // values: the replicas' mean (exactly, with codec none, up to the order of the additions).
  // exact: the messages of this round travel uncompressed (codec none), whatever opt.codec is.
  void begin(float* buf, int64_t n, int64_t step, int round, bool exact = false);
  void execute(const Action& a);  // a DP Send or Recv of the current round
  void end();

  DpStats takeStats();
  // Time 0 of the replicas' links' bandwidth traces (the run's common start).
  void setTraceOrigin(double origin);
  // Digest per codec-pair key (see above) of every codec this replica holds.
  nlohmann::json digests() const;

 private:
  int64_t chunkBegin(int c) const { return protocol::dpChunkBegin(n_, c, opt_.replicas); }
  int64_t chunkLen(int c) const { return protocol::dpChunkValues(n_, c, opt_.replicas); }
  int32_t tag(Action::Message m, int chunk) const;
  // The codec `key` of one half (a channel end's, or the exchange's own): exact rounds (qadam's
  // warm-up) have codecs "exact/<key>" of their own, "none", which leave no state behind.
  compression::Codec& codec(CodecHalf& half, const std::string& key, const std::string& role);
  // Frames are ZeroMQ messages from the encoder to the socket and from the socket to the relay:
  // a frame's bytes are never copied on this side (a frame sent to several replicas is shared).
  zmq::message_t encode(compression::Codec& c, Action::Message m, int chunk, const float* x,
                        int peer);
  compression::CodecContext context(int chunk, int tag) const;
  // Decodes a frame into out with the encoder's context, on the channel it came in on (nullptr:
  // a frame of this replica's own).
  void decodeMessage(compression::Codec& c, ChannelIn* from, const zmq::message_t& frame, int chunk,
                     std::vector<float>& out);
  void sendFrame(int peer, zmq::message_t frame, int chunk);
  void sendShared(int peer, zmq::message_t& frame, int chunk);  // a reference-counted copy
  zmq::message_t recvFrame(int peer, Action::Message m, int chunk);
  // Decodes a frame of chunk `chunk` with c, then adds it to or puts it in the buffer's chunk.
  void decodeInto(compression::Codec& c, ChannelIn* from, const zmq::message_t& frame, int chunk,
                  bool add);
  void aggregateShard();

  DpOptions opt_;
  zmq::context_t& ctx_;
  std::unique_ptr<emulator::LinkModel>
      inbound_;  // the receiving part of its links' model (none: pipelined stamps all)
  std::map<int, std::unique_ptr<ChannelIn>> in_;    // by replica: the links q -> this replica
  std::map<int, std::unique_ptr<ChannelOut>> out_;  // the links this replica -> q
  CodecHalf ownEncoders_, ownDecoders_;  // frames encoded once for several replicas (above)
  double ownDecodeS_ = 0;                // decoding own frames, adding and copying decoded chunks
  // The round in progress.
  float* buf_ = nullptr;
  int64_t n_ = 0, step_ = 0;
  int round_ = 0, pushes_ = 0;
  bool exact_ = false;
  std::map<int, zmq::message_t> relay_;       // all-gather frames to pass on, by chunk
  std::optional<zmq::message_t> own_;         // this replica's encoded chunk / shard average
  std::map<int, std::vector<float>> pushed_;  // sharded_ps: the shards pushed to this server
  std::vector<float> tmp_;
};

}  // namespace slowpipe::runtime
