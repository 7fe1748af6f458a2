#!/usr/bin/env bash
# One GPU call for this branch (docs/branches.md, exp-wide-rows): the full test command, then the
# wide rows against the plans they replace (--tune wide_rows=0), same build, torch.compile beside.
#   run: REDUCEKIT_JOBS=16 bash wip/run_wide.sh   (results under $OUT/r, packed as $OUT/all.tgz)
source scripts/remote_call.sh
REDUCEKIT_JOBS=16 timeout 380 bash scripts/test.sh >"$R/test.log" 2>&1
echo "test rc $? at $((SECONDS - T0)) s"
grep -E "tests passed|skipped|passed|failed|error|took" "$R/test.log" | tail -20
cp build.ctest.log "$R/" 2>/dev/null
S="--ops layer_norm,rms_norm,rms_norm_bias --dtypes bf16,fp16,fp32 --no-plot --graph none --reps 60
   --shapes 4096x32768,2048x32768,8192x32768,4096x24576,4096x20000,2048x32767"
python3 bench/bench.py $S --impls reducekit,torch.compile --budget-s 120 --out "$R/wide" >"$R/wide.log" 2>&1
echo "wide rc $? at $((SECONDS - T0)) s"
python3 bench/bench.py $S --impls reducekit --tune wide_rows=0 --out "$R/before" >"$R/before.log" 2>&1
echo "before rc $? at $((SECONDS - T0)) s"
python3 - "$R" <<'PY'
import json, os, sys
R = sys.argv[1]
t = {}
for name in ("wide", "before"):
    p = f"{R}/{name}/results.json"
    if not os.path.exists(p): continue
    for r in json.load(open(p))["records"]:
        if r.get("gbps"):
            col = "compile" if r["impl"] == "torch.compile" else name
            t.setdefault((r["op"], r["dtype"], "x".join(map(str, r["shape"]))), {})[col] = r["gbps"]
print("op dtype shape wide before compile")
for k in sorted(t):
    print(*k, *[f"{t[k].get(c, 0):.0f}" for c in ("wide", "before", "compile")])
PY
