#!/bin/sh
# mpirun's remote-shell agent for network namespaces standing in for hosts (the multi-host tests,
# README "Running on a cluster"): mpirun calls `AGENT HOST COMMAND...` as it would call ssh; this
# runs COMMAND inside namespace HOST instead.
#   mpirun --mca plm_rsh_agent tools/netns_rsh_agent.sh -H ns0,ns1,ns2 ...
host=$1
shift
exec ip netns exec "$host" /bin/sh -c "$*"
