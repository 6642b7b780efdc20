#!/usr/bin/env bash
# The delay line alone (results/README.md section 14): round trips, rates and windows through two
# namespaces joined by slowpipe's TUN delay line (no netem), one JSON per case in OUT.
#
#   sudo tools/delay_line_check.sh [OUT]     (default results/wan/delay_line; needs build/slowpipe, iperf3)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/wan/delay_line}
BIN=${SLOWPIPE_BIN:-build/slowpipe}
mkdir -p "$OUT"
run() { local name=$1; shift; "$BIN" emulator delayline "$@" > "$OUT/$name.json"; echo "$name: $*"; }
run rtt_10ms_each_way   --rate 100Mbps --delay 10ms --probes 200
run rtt_25ms_each_way   --rate 1Gbps --delay 25ms --probes 200
run rate_1gbps_mtu1500_cubic --rate 1Gbps --delay 1ms --mtu 1500 --probes 20 --iperf 5 --cc cubic
run rate_1gbps_mtu1500_bbr   --rate 1Gbps --delay 1ms --mtu 1500 --probes 20 --iperf 5 --cc bbr
run rate_10gbps_mtu9000_cubic --rate 10Gbps --delay 1ms --mtu 9000 --probes 20 --iperf 5 --cc cubic
run window_1gbps_50ms_cubic --rate 1Gbps --delay 50ms --mtu 1500 --probes 20 --iperf 20 --cc cubic
run reno_1pct_loss_10ms --rate 1Gbps --delay 10ms --mtu 1500 --loss 0.01 --probes 20 --iperf 20 --cc reno
# What interrupt moderation saves the host (DelayLineOptions::batchS): the same stream without it
# and with "auto" (100 us at 25 ms), twice each, alternately.
for k in 1 2; do
  run moderation_off_200mbps_25ms_reno_$k --rate 200Mbps --delay 25ms --mtu 1500 --probes 20 --iperf 5 --cc reno --moderation-us 0
  run moderation_auto_200mbps_25ms_reno_$k --rate 200Mbps --delay 25ms --mtu 1500 --probes 20 --iperf 5 --cc reno --moderation-us -1
done
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, math, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    line = os.path.basename(f)[:-5]
    r = d.get("rtt_s", {})
    s = f"{line}: rtt median {r.get('median', float('nan')) * 1e3:.3f} ms (expected {d['expected_rtt_s'] * 1e3:.1f})"
    if "iperf3" in d:
        i = d["iperf3"]
        s += f", iperf3 {i['bits_per_second'] / 1e6:.1f} Mbps (second half {i['second_half_median_bps'] / 1e6:.1f}), line rate {i['line_rate_bps'] / 1e6:.1f} Mbps, retransmits {i['retransmits']}"
        if "link_ok" in d:
            s += f", link_ok {d['link_ok']} ({100 * d['rate_error']:+.1f}%)"
    st = d.get("stats", {})
    if "forwarding" in st and "iperf3" in d:
        packets = sum(st[k]["delivered"] for k in ("a_to_b", "b_to_a"))
        late = st["a_to_b"].get("lateness_us", {})
        s += (f"; moderation {d['line'].get('moderation_us', 0):.0f} us: forwarding {st['forwarding']['cpu_s']:.2f} CPU-s, "
              f"{1e6 * st['forwarding']['cpu_s'] / packets:.1f} us a packet ({packets} packets), lateness median "
              f"{late.get('median', float('nan')):.0f} us, p99 {late.get('p99', float('nan')):.0f} us")
    print(s)
PY
