// The replay's messages between their send and their receipt (simulate.cc): every directed link as
// the run's link table has it (runtime/comm/link_table.h: the pipeline's links under network.model,
// the replicas' under pipelined; network.nodes' shared access links), its clock seeded as in every
// tier (runtime/exec/ranks.h), the sender's and the receiver's parts of its model; or, with
// network.model ns3, the packet network that carries them. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/link.h"
#include "emulator/link_model.h"
#include "emulator/shaped_socket.h"
#include "runtime/comm/link_table.h"
#include "runtime/exec/ranks.h"
#include "runtime/spec/spec.h"
#include "simulator/packet_network.h"
#include "simulator/replay_state.h"

namespace slowpipe::simulator {

class Mailroom {
 public:
  Mailroom(const runtime::RunSpec& spec, const runtime::RankLayout& layout, bool recordMessages);

  // network.model ns3: the packet network carries every message from now on.
  void usePacketNetwork();
  PacketNetwork* packetNetwork() const { return packet_.get(); }

  // Message k of `bytes` leaves k.from for k.to at `now`: stamped with its arrival by the link's
  // model (true), or handed to the packet network, which calls delivered(k, t) (false).
  bool post(const MailKey& k, int64_t bytes, double now,
            std::function<void(const MailKey&, double)> delivered);
  // The packet network delivered message k at t.
  void arrived(const MailKey& k, double t);

  enum class Found { kNotYet, kInFlight, kHere };
  // The receiver asks for message k: not sent yet, in the packet network, or here (taken: its
  // arrival and bytes; one the sender's part left unstamped is billed now, in the receiver's
  // retrieval order, by its part of the link model: serial_fifo's one inbound wire).
  Found take(const MailKey& k, double* arrival, int64_t* bytes);

  // Who waits for a message not yet here (the event loops wake them).
  void await(const MailKey& k, int rank) { waiting_[k] = rank; }
  std::optional<int> waiter(const MailKey& k);

  // SLOWPIPE_LINK_DRAWS: every link's draws, as the emulator's channels write them.
  void writeDraws() const;
  // SimOptions::recordMessages: every message (from, to, step, micro-batch, chunk, round, kind,
  // bytes, sent, arrival).
  const nlohmann::json& messages() const { return messages_; }
  const runtime::LinkTable& linkTable() const { return linkTable_; }

 private:
  struct Link {
    runtime::LinkEntry entry;
    emulator::LinkClock clock;
    std::unique_ptr<emulator::LinkModel> sender;
  };
  // The directed link from -> to, made at its first message.
  Link& link(int from, int to);
  void log(const MailKey& k, const Message& m, double arrival);

  const runtime::RunSpec& spec_;
  const runtime::RankLayout& layout_;
  bool record_;
  runtime::LinkTable linkTable_{spec_, {}};  // every link paced and billed in virtual time
  emulator::AccessLinks access_{linkTable_.accessCalendars()};  // network.nodes' access links
  std::unique_ptr<PacketNetwork> packet_;                       // network.model ns3
  std::unordered_map<uint64_t, Link> links_;                    // by (from rank, to rank)
  std::vector<std::unique_ptr<emulator::LinkModel>>
      inbound_;  // the receiver's part of the model, per rank (made at its first bill)
  std::unordered_map<MailKey, Message, MailKeyHash> mail_;
  std::unordered_map<MailKey, int, MailKeyHash> waiting_;
  nlohmann::json messages_ = nlohmann::json::array();
};

}  // namespace slowpipe::simulator
