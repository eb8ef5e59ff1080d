#!/usr/bin/env bash
# A single-node Slurm for tests: munged, slurmctld and slurmd as root, without systemd,
# everything (config, state, sockets, logs) under one directory, stopped by pid.
# usage: slurm_cluster.sh start DIR   |   slurm_cluster.sh stop DIR
# After start, `source DIR/env.sh` sets SLURM_CONF for the client commands.
set -euo pipefail
action=$1 dir=$2

stop() {
  if [ -f "$dir/env.sh" ]; then
    # shellcheck disable=SC1091
    source "$dir/env.sh"
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  for daemon in slurmd slurmctld munged; do
    if [ -f "$dir/$daemon.pid" ]; then
      pid=$(cat "$dir/$daemon.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
}

if [ "$action" = stop ]; then
  stop
  exit 0
fi

command -v slurmctld >/dev/null && command -v munged >/dev/null ||
  { echo "slurm-wlm and munge are not installed (scripts/setup.sh installs them)"; exit 1; }
mkdir -p "$dir"/{state,spool,munge,tmp}
chmod 700 "$dir/munge"
host=$(hostname -s)

# munge: a fresh key, its own socket.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/munge.seed"

cat >"$dir/slurm.conf" <<CONF
ClusterName=pipefilltest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
# The steps' scratch (PMIx's spmix_appdir_UID_JOB.STEP) in this cluster's own directory: in
# /tmp, a killed earlier cluster's left job 1's and the next cluster's job 1 failed to launch.
TmpFS=$dir/tmp
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env.sh"
export SLURM_CONF=$dir/slurm.conf
slurmctld -i
slurmd
for _ in $(seq 100); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "slurm up: $(sinfo -h -o '%P %D %T %c')"
    exit 0
  fi
  sleep 0.2
done
echo "slurm did not come up; logs:"; tail -n 20 "$dir"/*.log
stop
exit 1
