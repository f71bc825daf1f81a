# Sourced by the Slurm tests: starts a real single-node Slurm (munged, slurmctld and slurmd on this machine,
# configured in a temporary directory $work; nothing in /etc is touched) and stops it on exit. Defines skip() and
# fail(); sets $work, $cpus and exports SLURM_CONF. Skips (exit 77) where Slurm cannot run here, saying why.

skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root to run slurmd and munged (CI runs as root)"
for b in munged slurmctld slurmd sbatch sinfo; do
  command -v "$b" >/dev/null || skip "$b is not installed (apt-get install slurm-wlm munge; scripts/install-deps.sh does)"
done
/usr/bin/python3 -c "import h5py, pandas" 2>/dev/null || skip "python3-h5py and python3-pandas are needed to check the result"

work=$(mktemp -d /tmp/spansim-slurm.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munged.pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 1
  for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munged.pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  [ -n "${KEEP_SLURM_TEST_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
show_logs() {
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
}

# munge: own key, socket, pid and log files.
mkdir -p "$work/munge"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge/munge.seed" \
  || { show_logs; skip "munged does not start here (see its log above)"; }
for _ in $(seq 50); do [ -S "$work/munge/munge.socket" ] && break; sleep 0.1; done
munge --socket="$work/munge/munge.socket" -n </dev/null | unmunge --socket="$work/munge/munge.socket" >/dev/null \
  || { show_logs; skip "munge cannot encode and decode a credential here"; }

# Free TCP ports for the two daemons.
read -r ctld_port slurmd_port < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/state" "$work/spool" "$work/results"
cat > "$work/slurm.conf" <<CONF
ClusterName=spansimtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf

slurmctld -i -f "$SLURM_CONF" || { show_logs; skip "slurmctld does not start here (see its log above)"; }
slurmd -f "$SLURM_CONF" || { show_logs; skip "slurmd does not start here (see its log above)"; }
state=""
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -n1)
  [ "$state" = "idle" ] && break
  sleep 1
done
[ "$state" = "idle" ] || { sinfo -N -l >&2; show_logs; skip "the local Slurm node never became idle (state \"$state\")"; }
echo "Slurm up: node $host, $cpus CPUs, state $state"
