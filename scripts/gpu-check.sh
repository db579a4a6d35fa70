#!/usr/bin/env bash
# GPU check: run on a machine with an NVIDIA GPU (about 2 minutes on one H200). It runs ddpkit's GPU path
# for real, saves the raw nvidia-smi outputs and the doctor's JSON as new test fixtures, and
# exits non-zero if the GPU path reports anything wrong.
#
#   scripts/gpu-check.sh [OUTDIR]      (default: $OUT, else ./gpu-check-out)
#
# Needs python3 with torch (CUDA build), rich, psutil and py-spy; ddpkit is used from this checkout.
# It ends with `GPU-CHECK PASS` or `GPU-CHECK FAIL` and a line for each problem.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-gpu-check-out}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$here" || exit 1
py=${PYTHON:-python3}
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
status=0
fail() { echo "GPU-CHECK FAIL: $*"; status=1; }

echo "== nvidia-smi"
nvidia-smi > "$out/smi-table.txt" 2>&1 || fail "nvidia-smi failed"
nvidia-smi -q > "$out/smi-q.txt" 2>&1 || fail "nvidia-smi -q failed"
nvidia-smi -L | tee "$out/smi-L.txt"
ngpu=$(grep -c '^GPU ' "$out/smi-L.txt")

echo "== ddpkit doctor"
timeout 120 "$py" -m ddpkit doctor --json > "$out/doctor.json"
echo "doctor exit code $?"
timeout 120 "$py" -m ddpkit doctor > "$out/doctor.txt" 2>&1
cat "$out/doctor.txt"
"$py" - "$out/doctor.json" "$ngpu" "$out" <<'PY' || fail "doctor's GPU path"
import json, sys
from pathlib import Path
sys.path.insert(0, "src")
from ddpkit.parsers.nvsmi import parse_smi_query, parse_smi_table

report = json.load(open(sys.argv[1]))
ngpu, out = int(sys.argv[2]), Path(sys.argv[3])
checks = {c["id"]: c for c in report["checks"]}
facts = report["facts"]
bad = [f"{c['id']}: {c['status']}: {c['summary']}" for c in report["checks"]
       if c["id"].startswith(("gpu.", "torch.")) and c["status"] in ("fail", "warn")]
problems = list(bad)
if facts["gpu_count"] != ngpu:
    problems.append(f"doctor saw {facts['gpu_count']} GPUs, nvidia-smi -L lists {ngpu}")
if not facts["torch"]["cuda"]:
    problems.append("torch facts show no CUDA build")
if not facts["torch"]["backends"].get("nccl"):
    problems.append("NCCL backend not reported")
q = parse_smi_query((out / "smi-q.txt").read_text())
t = parse_smi_table((out / "smi-table.txt").read_text())
if len(q.gpus) != ngpu or len(t.gpus) != ngpu:
    problems.append(f"parsers: -q saw {len(q.gpus)}, table saw {len(t.gpus)}, expected {ngpu}")
if not (q.driver_version and q.driver_version == t.driver_version == facts["driver"]):
    problems.append(f"driver versions differ: -q {q.driver_version}, table {t.driver_version}, "
                    f"doctor {facts['driver']}")
print("doctor GPU facts:", facts["gpu_count"], facts["gpu_model"], "driver", facts["driver"],
      "torch", facts["torch"]["version"], "cuda", facts["torch"]["cuda"], "nccl",
      facts["torch"]["nccl"])
for p in problems:
    print("  problem:", p)
sys.exit(1 if problems else 0)
PY

echo "== ddpkit demo (NCCL, one process per GPU)"
timeout 180 "$py" -m ddpkit demo --json > "$out/demo.json" 2> "$out/demo.txt"
demo_rc=$?
tail -12 "$out/demo.txt"
"$py" - "$out/demo.json" "$ngpu" <<'PY' || fail "demo on the GPU"
import json, sys
report = json.load(open(sys.argv[1]))
ngpu = int(sys.argv[2])
ranks = report.get("ranks", [])
problems = [] if report.get("passed") else ["demo did not pass"]
if len(ranks) != ngpu:
    problems.append(f"{len(ranks)} ranks for {ngpu} GPUs")
if any(r["backend"] != "nccl" or not r["device"].startswith("cuda") for r in ranks):
    problems.append("not every rank ran NCCL on a GPU: " + str([(r["backend"], r["device"]) for r in ranks]))
for p in problems:
    print("  problem:", p)
sys.exit(1 if problems else 0)
PY
[ $demo_rc -eq 0 ] || fail "ddpkit demo exit code $demo_rc"

echo "== ddpkit bench on NCCL (the guide's sizes)"
timeout 240 "$py" -m ddpkit bench --backend nccl -b 8 -e 256M -f 2 --json-file "$out/bench.json" \
  > "$out/bench.txt" 2> "$out/bench.err"
bench_rc=$?
cat "$out/bench.txt"
[ $bench_rc -eq 0 ] || { tail -20 "$out/bench.err"; fail "ddpkit bench exit code $bench_rc"; }
"$py" - "$out/bench.json" <<'PY' || fail "bench on NCCL"
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
if r["backend"] != "nccl":
    problems.append("backend " + r["backend"])
if any(row[k]["wrong"] for row in r["rows"] for k in ("oop", "ip")):
    problems.append("wrong values")
# one GPU: nccl-tests' bus bandwidth is 0 by definition (factor 2(n-1)/n), so look at algbw
bw = r["avg_busbw"] if r["world_size"] > 1 else min((row["oop"]["algbw"] for row in r["rows"]), default=0)
if not r["rows"] or bw <= 0:
    problems.append("no bandwidth measured")
for p in problems:
    print("  problem:", p)
sys.exit(1 if problems else 0)
PY

# nccl-tests' all_reduce_perf beside it, where one is installed (we never fetch or build it
# here: set NCCL_TESTS_DIR to a built nccl-tests, or put all_reduce_perf on PATH).
perf=$(command -v all_reduce_perf || true)
[ -z "$perf" ] && [ -n "${NCCL_TESTS_DIR:-}" ] && perf="$NCCL_TESTS_DIR/build/all_reduce_perf"
if [ -n "$perf" ] && [ -x "$perf" ]; then
  echo "== nccl-tests all_reduce_perf, same sizes"
  timeout 240 "$perf" -b 8 -e 256M -f 2 -g "$ngpu" > "$out/nccl-tests.txt" 2>&1 || fail "all_reduce_perf"
  # torch's all_reduce works in place (its two ddpkit columns time the same call), so it is
  # set beside nccl-tests' in-place columns. On one GPU NCCL has nothing to move for an in-place
  # all_reduce: both times are then the cost of one call (torch.distributed's, nccl-tests' C loop).
  echo "== side by side, in place (the call torch makes): time (us), algbw and busbw (GB/s)"
  "$py" - "$out/bench.json" "$out/nccl-tests.txt" <<'PY'
import json, sys
ours = {r["size"]: r["ip"] for r in json.load(open(sys.argv[1]))["rows"]}
print("%12s  %9s %9s %7s  %9s %9s  %8s %8s" % ("size", "ddpkit", "nccl-tests", "ratio", "algbw",
                                                "nt algbw", "busbw", "nt busbw"))
ratios = []
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) == 13 and f[0].isdigit() and int(f[0]) in ours:
        o, theirs = ours[int(f[0])], float(f[9])
        ratios.append(o["time_us"] / theirs if theirs else float("inf"))
        print("%12s  %9.2f %9s %7.1f  %9.2f %9s  %8.2f %8s" % (f[0], o["time_us"], f[9], ratios[-1],
                                                              o["algbw"], f[10], o["busbw"], f[11]))
if ratios:
    ratios.sort()
    print("time ratio ddpkit / nccl-tests, in place: median %.1f (min %.1f, max %.1f)"
          % (ratios[len(ratios) // 2], ratios[0], ratios[-1]))
PY
else
  echo "== nccl-tests not found (no all_reduce_perf on PATH, NCCL_TESTS_DIR unset): skipped"
fi

# Real failures on this GPU, each read back by `ddpkit diagnose RUN_DIR` (the recorded copies in
# tests/fixtures/diagnose/device are tested without a GPU).
echo "== ddpkit diagnose on real GPU runs"
runs="$out/runs"; mkdir -p "$runs"
diag_run() {  # name nproc script expected-category [VAR=VALUE...]
  local name=$1 n=$2 script=$3 want=$4; shift 4
  env "$@" timeout 150 "$py" -m ddpkit launch --nproc-per-node "$n" --log-dir "$runs/$name" \
    "$script" > "$runs/$name.out" 2>&1
  local rc=$?
  timeout 60 "$py" -m ddpkit diagnose "$runs/$name" --json > "$runs/$name.diag.json" 2>&1
  "$py" - "$runs/$name.diag.json" "$name" "$rc" "$want" <<'PY' || fail "diagnose $name"
import json, sys
path, name, rc, want = sys.argv[1:]
try:
    got = json.load(open(path))["category"]
except Exception as exc:
    got = "unreadable: %s" % exc
ok = got == want and (rc == "0") == (want == "none")
print("  %-15s launch exit %-3s diagnose %-30s %s" % (name, rc, got, "ok" if ok else "expected " + want))
sys.exit(0 if ok else 1)
PY
}
diag_run ok-info 1 examples/ddp_seed_corrected.py none NCCL_DEBUG=INFO
diag_run dup-gpu 2 scripts/gpu/dup_gpu.py duplicate_gpu_or_wrong_device
diag_run dup-gpu-warn 2 scripts/gpu/dup_gpu.py duplicate_gpu_or_wrong_device NCCL_DEBUG=WARN
diag_run too-many-procs $((ngpu + 1)) examples/ddp_seed_corrected.py duplicate_gpu_or_wrong_device
diag_run oom 1 scripts/gpu/oom.py oom_cuda_error
diag_run nogpu 1 scripts/gpu/dup_gpu.py duplicate_gpu_or_wrong_device CUDA_VISIBLE_DEVICES=

# A CUDA rank that stops printing: py-spy's stacks and torch's NCCL flight recorder (the dump that
# only a CUDA build has) must both come back, and the launch must end HUNG with nothing left over.
echo "== ddpkit launch --hang-timeout on a CUDA rank (stacks, NCCL flight recorder)"
timeout 150 "$py" -m ddpkit launch --nproc-per-node 1 --hang-timeout 15 --log-dir "$runs/hang" --json \
  scripts/gpu/hang_gpu.py > "$runs/hang.json" 2> "$runs/hang.err"
hang_rc=$?
"$py" - "$runs/hang.json" "$runs/hang/fr.json" "$hang_rc" <<'PY' || fail "hang: stacks or flight recorder"
import json, sys
problems = [] if sys.argv[3] == "1" else ["launch exit %s, expected 1" % sys.argv[3]]
try:
    stacks = json.load(open(sys.argv[1])).get("stacks") or {}
    fr = json.load(open(sys.argv[2]))
except Exception as exc:
    stacks, fr = {}, {}
    problems.append("no stacks or flight-recorder summary: %s" % exc)
if "evaluate() at hang_gpu.py" not in (stacks.get("verdict") or ""):
    problems.append("stacks verdict: %r" % stacks.get("verdict"))
dumps = (fr.get("ranks", {}).get("0") or {}).get("dumps", {})
entries = (dumps.get("nccl_rank_") or {}).get("entries") or []
if [e["op"] for e in entries] != ["nccl:all_reduce"] * 2:
    problems.append("NCCL flight recorder entries: %r" % [e.get("op") for e in entries])
print("  stacks:", stacks.get("verdict"))
print("  NCCL flight recorder: %d entries, %s" % (len(entries), sorted({e["state"] for e in entries})))
for p in problems:
    print("  problem:", p)
sys.exit(1 if problems else 0)
PY
left=$(pgrep -f "torch.distributed.run|hang_gpu.py" | wc -l)
[ "$left" -eq 0 ] || fail "$left processes left behind after the hang"

echo "== result"
if [ $status -eq 0 ]; then echo "GPU-CHECK PASS"; else echo "GPU-CHECK FAIL"; fi
echo "fixtures saved in $out (copy smi-*.txt to tests/fixtures/gpu/ with the driver in the name)"
exit $status
