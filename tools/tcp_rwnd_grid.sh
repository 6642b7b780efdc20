#!/usr/bin/env bash
# The tcp link model's receive window against the kernel's, per message, on a grid fixed before
# the model had one (results/README.md section 16, "The receive window"): the send buffer's
# maximum raised to 64 MiB (network.tcp.wmem_max) so that the receiver's window is what limits a
# connection, net.ipv4.tcp_rmem's maximum {1 MiB, 4 MiB} (network.tcp.rmem_max) x rate {100 Mbps,
# 1 Gbps} x one-way delay {10, 50} ms (RTT 20, 100) x congestion control {cubic, bbr}, MTU 1500,
# no loss; per connection the messages 1 MiB after 0, then 16 MiB after 0, 1 RTT and 5 RTO
# (RTO = RTT + 200 ms). Three repeats of each case, compared by their means (tools/tcp_grid_summary.py).
# Writes OUT/<rate>_<delay>_<cc>_rmem<bytes>_loss0_seed<r>.json and OUT.json. SKIP_MEASURE=1
# re-bills the saved runs with the current model instead of measuring.
#
#   sudo tools/tcp_rwnd_grid.sh [OUT]     (default results/wan/rwnd_validation; needs build/slowpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/rwnd_validation}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
mkdir -p "$OUT"
if [ "${SKIP_MEASURE:-0}" = 1 ]; then "$BIN" emulator tcp-rebill "$OUT"/*_seed*.json; else
for rate in 100Mbps 1Gbps; do
  for delay in 10 50; do
    rtt=$(/usr/bin/python3 -c "print(2 * $delay / 1000)")
    rto=$(/usr/bin/python3 -c "print(5 * (2 * $delay / 1000 + 0.2))")
    args=(--bytes 1048576 --idle 0 --bytes 16777216 --idle 0 --bytes 16777216 --idle "$rtt" --bytes 16777216 --idle "$rto")
    for cc in cubic bbr; do
      for rmem in 1048576 4194304; do
        for seed in 1 2 3; do
          f="$OUT/${rate}_${delay}ms_${cc}_rmem${rmem}_loss0_seed${seed}.json"
          "$BIN" emulator tcp-messages --rate "$rate" --delay "${delay}ms" --mtu 1500 --cc "$cc" --seed "$seed" \
            --wmem-max 67108864 --rmem-max "$rmem" "${args[@]}" > "$f.tmp"
          mv "$f.tmp" "$f"
          echo "$rate ${delay}ms $cc rmem $rmem repeat $seed"
        done
      done
    done
  done
done
fi
/usr/bin/python3 tools/tcp_grid_summary.py "$OUT"
