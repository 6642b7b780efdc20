#!/bin/sh
# mpirun's remote-shell agent for network namespaces standing in for hosts (the multi-host tests,
# README "Running on a cluster"): mpirun calls `AGENT HOST COMMAND...` as it would call ssh; this
# runs COMMAND inside namespace HOST, with a UTS namespace of its own named HOST: each "host" has
# its own name, as real hosts do (OpenMPI names its session directories after the host; daemons of
# one name on one filesystem would share them and race).
#   mpirun --mca plm_rsh_agent tools/netns_rsh_agent.sh -H ns0,ns1,ns2 ...
host=$1
shift
exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*"
