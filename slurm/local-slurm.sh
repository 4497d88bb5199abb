#!/usr/bin/env bash
# A real Slurm on this one machine, for trying `nestor submit` and for the tests.
#
#   slurm/local-slurm.sh start [--nodes N]   munged, slurmctld and N slurmd (default 1)
#   slurm/local-slurm.sh status              what runs, and sinfo
#   slurm/local-slurm.sh stop                stop what `start` started, nothing else
#   slurm/local-slurm.sh env                 the SLURM_CONF line to export
#
# Debian's slurm-wlm and munge (Slurm 22.05) as measured in DESIGN.md: munged,
# SlurmUser=root, proctrack/linuxproc, task/none, cons_tres with CR_Core.
# With --nodes 2 the nodes are nestor1 and nestor2, both on this host, each
# its own slurmd (`slurmd -N NAME`, own port and spool): two Slurm nodes, so
# srun really places one task per node. Everything lives in $NESTOR_SLURM_DIR
# (default /var/spool/nestor-slurm); /etc/slurm/slurm.conf is linked to it only
# when there is none, so plain `sbatch` finds it; `stop` removes only that link.
set -euo pipefail

DIR=${NESTOR_SLURM_DIR:-/var/spool/nestor-slurm}
CONF=$DIR/slurm.conf
HOST=$(hostname -s)
# nproc honours OMP_NUM_THREADS, which Ray sets to 1 in any process that started it (a
# test run's, a user's notebook): the nodes would then offer 1 CPU each.
CPUS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))

die() { echo "local-slurm: $*" >&2; exit 1; }

need() {
    local missing=()
    for tool in munged slurmctld slurmd sbatch sinfo; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    ((${#missing[@]} == 0)) || die "missing ${missing[*]}; install them with:" \
        "apt-get install slurm-wlm munge"
    [[ $(id -u) == 0 ]] || die "must run as root (slurmd runs jobs as their users)"
}

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_conf() {
    local nodes=$1
    mkdir -p "$DIR/ctld" "$DIR/log"
    {
        echo "# written by nestor slurm/local-slurm.sh"
        echo "ClusterName=nestor"
        echo "SlurmctldHost=$HOST"
        echo "SlurmctldPort=${NESTOR_SLURMCTLD_PORT:-6817}"
        echo "SlurmUser=root"
        echo "AuthType=auth/munge"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "SchedulerType=sched/backfill"
        echo "ReturnToService=2"
        echo "KillWait=30"
        echo "MinJobAge=600"
        echo "MpiDefault=none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "StateSaveLocation=$DIR/ctld"
        echo "SlurmdSpoolDir=$DIR/d-%n"
        echo "SlurmctldPidFile=$DIR/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/slurmd-%n.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
        if ((nodes == 1)); then
            echo "NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN"
            echo "PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP"
        else
            local port=${NESTOR_SLURMD_PORT:-6818} names=()
            for ((i = 1; i <= nodes; i++)); do
                echo "NodeName=nestor$i NodeHostname=$HOST NodeAddr=127.0.0.1" \
                    "Port=$((port + i - 1)) CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN"
                names+=("nestor$i")
            done
            echo "PartitionName=debug Nodes=$(IFS=,; echo "${names[*]}") Default=YES" \
                "MaxTime=INFINITE State=UP"
        fi
    } >"$CONF"
}

node_names() { awk '/^NodeName=/ {sub("NodeName=", "", $1); print $1}' "$CONF"; }

start() {
    local nodes=1
    while (($#)); do
        case $1 in
            --nodes) nodes=${2:?--nodes needs a number}; shift 2 ;;
            *) die "unknown option $1 (allowed: --nodes N)" ;;
        esac
    done
    [[ $nodes =~ ^[1-9]$ ]] || die "--nodes must be 1 to 9, but got $nodes"
    need
    if pid_alive "$DIR/slurmctld.pid"; then
        echo "local Slurm already runs ($DIR); stop it first to change it"
        return 0
    fi
    mkdir -p "$DIR"
    write_conf "$nodes"
    if [[ ! -e /etc/slurm/slurm.conf ]]; then
        mkdir -p /etc/slurm
        ln -s "$CONF" /etc/slurm/slurm.conf
        echo /etc/slurm/slurm.conf >"$DIR/linked"
    fi
    if ! pid_alive /run/munge/munged.pid; then
        mkdir -p /run/munge && chown munge:munge /run/munge
        runuser -u munge -- munged --force
        cp /run/munge/munged.pid "$DIR/munged.started"
    fi
    slurmctld -f "$CONF"
    local name
    for name in $(node_names); do
        mkdir -p "$DIR/d-$name"
        slurmd -f "$CONF" -N "$name"
    done
    export SLURM_CONF=$CONF
    for _ in $(seq 100); do
        if [[ $(sinfo -h -o '%T' 2>/dev/null | grep -c idle) -ge 1 ]] &&
            ! sinfo -h -o '%T' | grep -qvE '^(idle|mixed|allocated)$'; then
            sinfo
            echo "local Slurm up: export SLURM_CONF=$CONF"
            return 0
        fi
        sleep 0.3
    done
    sinfo || true
    die "nodes did not become idle; see $DIR/log/"
}

stop() {
    [[ -f $CONF ]] || { echo "no local Slurm in $DIR"; return 0; }
    local name pidfile
    for name in $(node_names); do
        pidfile=$DIR/slurmd-$name.pid
        pid_alive "$pidfile" && kill "$(cat "$pidfile")"
    done
    pid_alive "$DIR/slurmctld.pid" && kill "$(cat "$DIR/slurmctld.pid")"
    if [[ -s $DIR/munged.started ]]; then
        kill "$(cat "$DIR/munged.started")" 2>/dev/null || true
        rm -f "$DIR/munged.started"
    fi
    if [[ -s $DIR/linked && -L /etc/slurm/slurm.conf ]]; then
        rm -f /etc/slurm/slurm.conf "$DIR/linked"
    fi
    for _ in $(seq 50); do
        pid_alive "$DIR/slurmctld.pid" || break
        sleep 0.2
    done
    # Job state goes too: the next start is a fresh cluster.
    rm -rf "$DIR/ctld" "$DIR"/d-*
    echo "local Slurm stopped"
}

status() {
    if [[ -f $CONF ]] && pid_alive "$DIR/slurmctld.pid"; then
        SLURM_CONF=$CONF sinfo
        echo "export SLURM_CONF=$CONF"
    else
        echo "local Slurm not running"
        return 3
    fi
}

case ${1:-} in
    start) shift; start "$@" ;;
    stop) stop ;;
    status) status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 start [--nodes N] | stop | status | env" >&2; exit 2 ;;
esac
