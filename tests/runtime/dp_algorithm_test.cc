// Every registered data-parallel algorithm (runtime/dp/algorithms/) in one process: R replicas as
// threads over loopback TCP, each running its round's action list through DpExchange, as a worker
// does. After the round every replica holds the replicas' mean (exact with codec none, to float
// rounding) and, with a lossy codec, the very same values on every replica (one encoded frame per
// chunk / shard is what everyone decodes).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "runtime/comm/link_table.h"
#include "runtime/dp/dp.h"
#include "runtime/exec/schedule.h"

namespace slowpipe::runtime {
namespace {

// Replica r's value i before the round.
float input(int r, int64_t i) {
  return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(r)) * (1.0f + r);
}

// Replica r's links as the launcher sends them: the link table of one stage with R replicas at 10
// Gbps.
RankLinks linksOf(int r, int R) {
  const nlohmann::json j = {
      {"name", "dp"},
      {"model", {{"seq_len", 4}, {"layers", 4}, {"width", 8}, {"heads", 2}}},
      {"pipeline", {{"stages", 1}, {"replicas", R}, {"micro_batches", 1}, {"micro_batch_size", 2}}},
      {"compression", {{"forward", "none"}, {"backward", "none"}}},
      {"network", {{"links", {{"bandwidth", "10Gbps"}, {"latency", "0ms"}}}}}};
  return RankLinks(LinkTable(runSpecFromJson(j, "spec", true), {}).ofRankJson(r), r);
}

// One round of `algorithm` over R replicas with n values each; returns every replica's buffer.
std::vector<std::vector<float>> runRound(const std::string& algorithm, int R, int64_t n,
                                         const std::string& codec) {
  zmq::context_t ctx(1);
  std::vector<std::unique_ptr<DpExchange>> ex;
  for (int r = 0; r < R; ++r) {
    DpOptions o;
    o.rank = r;
    o.replica = r;
    o.replicas = R;
    o.algorithm = algorithm;
    o.codec = codec;
    o.recvTimeoutS = 10;
    ex.push_back(std::make_unique<DpExchange>(ctx, o));
  }
  for (int r = 0; r < R; ++r) {
    nlohmann::json peers = nlohmann::json::object();
    for (int q = 0; q < R; ++q)
      if (q != r) peers[std::to_string(q)] = ex[q]->endpoints()[std::to_string(r)];
    ex[r]->connect(peers, linksOf(r, R));
  }
  std::vector<std::vector<float>> buf(R, std::vector<float>(n));
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) buf[r][i] = input(r, i);
  DpShape dp;
  dp.replicas = R;
  dp.algorithm = algorithm;
  std::vector<std::string> errors(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      try {
        std::vector<Action> round;
        appendDpRound(round, dp, r, 0);
        ex[r]->begin(buf[r].data(), n, 0, 0);
        for (const Action& a : round)
          if (a.isCommunication()) ex[r]->execute(a);
        ex[r]->end();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < R; ++r) EXPECT_EQ(errors[r], "") << algorithm << " replica " << r;
  return buf;
}

TEST(DpAlgorithmTest, EveryAlgorithmAveragesAndEveryReplicaAgrees) {
  for (const auto& info : dpAlgorithms())
    for (int R : {2, 3, 4})
      for (int64_t n : {int64_t{5}, int64_t{1001}}) {
        std::vector<double> mean(n, 0.0);
        for (int r = 0; r < R; ++r)
          for (int64_t i = 0; i < n; ++i) mean[i] += static_cast<double>(input(r, i)) / R;
        const auto exact = runRound(info.name, R, n, "none");
        for (int r = 0; r < R; ++r)
          for (int64_t i = 0; i < n; ++i)
            ASSERT_NEAR(exact[r][i], mean[i], 1e-6)
                << info.name << " R=" << R << " replica " << r << " value " << i;
        const auto lossy = runRound(info.name, R, n, "quant:bits=8");
        for (int r = 1; r < R; ++r)
          ASSERT_EQ(lossy[r], lossy[0])
              << info.name << " R=" << R << ": replicas decoded different bytes";
        double err = 0;
        for (int64_t i = 0; i < n; ++i) err = std::max(err, std::abs(lossy[0][i] - mean[i]));
        EXPECT_LT(err, 0.1) << info.name << " R=" << R;  // 8-bit messages of values within +-4
      }
}

}  // namespace
}  // namespace slowpipe::runtime
