#!/usr/bin/env bash
# GPU check: run on a machine with an NVIDIA GPU (under 5 minutes). It runs ddpkit's GPU path
# for real, saves the raw nvidia-smi outputs and the doctor's JSON as new test fixtures, and
# exits non-zero if the GPU path reports anything wrong.
#
#   scripts/gpu-check.sh [OUTDIR]      (default: $OUT, else ./gpu-check-out)
#
# Needs python3 with torch (CUDA build), rich and psutil; ddpkit is used from this checkout.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-gpu-check-out}}
mkdir -p "$out"
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
if not r["rows"] or r["avg_busbw"] <= 0:
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
  echo "== side by side (busbw out-of-place, GB/s): size  ddpkit  nccl-tests"
  "$py" - "$out/bench.json" "$out/nccl-tests.txt" <<'PY'
import json, sys
ours = {r["size"]: r["oop"]["busbw"] for r in json.load(open(sys.argv[1]))["rows"]}
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) > 8 and f[0].isdigit() and int(f[0]) in ours:
        print("%12s  %8.2f  %8s" % (f[0], ours[int(f[0])], f[7]))
PY
else
  echo "== nccl-tests not found (no all_reduce_perf on PATH, NCCL_TESTS_DIR unset): skipped"
fi

echo "== result"
if [ $status -eq 0 ]; then echo "GPU-CHECK PASS"; else echo "GPU-CHECK FAIL"; fi
echo "fixtures saved in $out (copy smi-*.txt to tests/fixtures/gpu/ with the driver in the name)"
exit $status
