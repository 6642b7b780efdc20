#!/usr/bin/env bash
# The tcp link model against the kernel's TCP through the delay line, per message, on four grids
# fixed before looking (results/README.md section 16). MTU 1500 but in GRID=mtu9000.
#
# GRID=main (the default; issue 25's): one-way delay {1, 10, 50, 125} ms (RTT 2, 20, 100, 250) x
# rate {100 Mbps, 1 Gbps} x congestion control {cubic, bbr} x packet loss {0, 0.1%} (Bernoulli,
# data direction); per connection the messages 64 KiB, 1 MiB, 16 MiB, each after an idle of 0,
# 1 RTT and 5 RTO (RTO = RTT + 200 ms), in that order. Every case runs three times: with loss,
# three seeds of the line's draws (the model draws with the same seeds): one draw of a lost packet
# in a 64 KiB message is not something a model of the link can be asked to place; without loss,
# three repeats, since one timing on these machines moves by more than the bound. Writes
# OUT/<rate>_<delay>_<cc>_loss<p>_seed<s>.json (OUT: results/wan/model_validation).
#
# GRID=rwnd (the receive window's ceiling, fixed before the model had one): the send buffer's
# maximum raised to 64 MiB (network.tcp.wmem_max) so that the receiver's window is what limits a
# connection, net.ipv4.tcp_rmem's maximum {1 MiB, 4 MiB} (network.tcp.rmem_max) x rate {100 Mbps,
# 1 Gbps} x one-way delay {10, 50} ms x {cubic, bbr}, no loss; per connection 1 MiB after 0, then
# 16 MiB after 0, 1 RTT and 5 RTO; three repeats. Writes
# OUT/<rate>_<delay>_<cc>_rmem<bytes>_loss0_seed<r>.json (OUT: results/wan/rwnd_validation).
#
# GRID=streams (network.tcp.streams, fixed before the model was compared per message): every
# message striped over N connections as the runtime's channel stripes a frame, N {4, 8} x rate
# {100 Mbps, 1 Gbps} x one-way delay {10, 50} ms x {cubic, bbr}, Linux's default buffers, no
# loss; the messages of GRID=rwnd; three repeats. Writes
# OUT/<rate>_<delay>_<cc>_streams<N>_loss0_seed<r>.json (OUT: results/wan/streams_validation).
#
# GRID=mtu9000 (the receiver's window growth, fixed before the model was compared at this MTU):
# MTU 9000, where Linux's first receive window (64 KiB) is below the initial congestion window (10
# segments, 89,480 bytes), rate {100 Mbps, 1 Gbps} x one-way delay {10, 50} ms x {cubic, bbr},
# Linux's default buffers, no loss; per connection the main grid's 9 messages; three repeats.
# Writes OUT/<rate>_<delay>_<cc>_mtu9000_loss0_seed<r>.json (OUT: results/wan/mtu9000_validation).
#
# The comparison is of the means over a case's three runs (tools/tcp_grid_summary.py): OUT.json
# (median and max |error|, worst cases) and the printout. SKIP_MEASURE=1 re-bills the saved runs
# with the current model (slowpipe emulator tcp-rebill) instead of measuring; MISSING_ONLY=1
# measures only the runs that have no file yet.
#
#   sudo [GRID=rwnd|streams|mtu9000] tools/tcp_model_grid.sh [OUT]     (needs build/slowpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
GRID=${GRID:-main}
case "$GRID" in
  main) OUT=${1:-results/wan/model_validation}; delays="1 10 50 125"; ccs="cubic bbr"; losses="0 0.001"; variants="kernel" ;;
  rwnd) OUT=${1:-results/wan/rwnd_validation}; delays="10 50"; ccs="cubic bbr"; losses="0"; variants="1048576 4194304" ;;
  streams) OUT=${1:-results/wan/streams_validation}; delays="10 50"; ccs="cubic bbr"; losses="0"; variants="streams4 streams8" ;;
  mtu9000) OUT=${1:-results/wan/mtu9000_validation}; delays="10 50"; ccs="cubic bbr"; losses="0"; variants="mtu9000" ;;
  *) echo "GRID=$GRID: expected main, rwnd, streams or mtu9000" >&2; exit 2 ;;
esac
BIN=${SLOWPIPE_BIN:-build/slowpipe}
mkdir -p "$OUT"
if [ "${SKIP_MEASURE:-0}" = 1 ]; then "$BIN" emulator tcp-rebill "$OUT"/*_seed*.json; else
for rate in 100Mbps 1Gbps; do
  for delay in $delays; do
    rtt=$(/usr/bin/python3 -c "print(2 * $delay / 1000)")
    rto=$(/usr/bin/python3 -c "print(5 * (2 * $delay / 1000 + 0.2))")
    args=()
    if [ "$GRID" = main ] || [ "$GRID" = mtu9000 ]; then  # per connection (group): 9 messages, else 4
      for bytes in 65536 1048576 16777216; do
        for idle in 0 "$rtt" "$rto"; do args+=(--bytes "$bytes" --idle "$idle"); done
      done
    else
      args=(--bytes 1048576 --idle 0 --bytes 16777216 --idle 0 --bytes 16777216 --idle "$rtt" --bytes 16777216 --idle "$rto")
    fi
    for cc in $ccs; do
      for variant in $variants; do
        for loss in $losses; do
          for seed in 1 2 3; do
            buffers=() name="${rate}_${delay}ms_${cc}" mtu=1500
            case "$variant" in
              kernel) ;;
              mtu9000) mtu=9000; name="${name}_mtu9000" ;;
              streams*) buffers=(--streams "${variant#streams}"); name="${name}_${variant}" ;;
              *) buffers=(--wmem-max 67108864 --rmem-max "$variant"); name="${name}_rmem${variant}" ;;
            esac
            f="$OUT/${name}_loss${loss}_seed${seed}.json"
            [ "${MISSING_ONLY:-0}" = 1 ] && [ -s "$f" ] && continue
            "$BIN" emulator tcp-messages --rate "$rate" --delay "${delay}ms" --mtu "$mtu" --cc "$cc" --loss "$loss" --seed "$seed" \
              "${buffers[@]}" "${args[@]}" > "$f.tmp"
            mv "$f.tmp" "$f"
            echo "$name loss $loss seed $seed"
          done
        done
      done
    done
  done
done
fi
/usr/bin/python3 tools/tcp_grid_summary.py "$OUT"
