#!/usr/bin/env bash
# One GPU call for branch exp-norm-levers (docs/branches.md): the full test command, then the two
# levers against the plans they replace, same build: default (both on), --tune wide_rows=0 (main's
# plans for the one-input norms), --tune read_back_second=0 (main's second pass for the residual
# forms); torch.compile beside the default. Results under $OUT/r, packed as $OUT/all.tgz.
#   REDUCEKIT_JOBS=16 bash wip/run_levers.sh
source scripts/remote_call.sh
REDUCEKIT_JOBS=16 timeout 330 bash scripts/test.sh >"$R/test.log" 2>&1
echo "test rc $? at $((SECONDS - T0)) s"
grep -E "tests passed|skipped \(|passed|failed|error|took" "$R/test.log" | tail -20
cp build.ctest.log "$R/" 2>/dev/null
for f in build.pytest*.log; do grep -qE " failed|error" "$f" && cp "$f" "$R/"; done
S="--dtypes bf16,fp32 --no-plot --graph none --reps 50 --warmup 10
   --shapes 4096x32768,2048x32768,4096x24576,4096x20000,2048x32767,2048x50264,256x262144"
WIDE_OPS=layer_norm,rms_norm,rms_norm_bias  # the wide rows' ops
RB_OPS=add_layer_norm,add_rms_norm          # the read-back's
python3 bench/bench.py $S --ops $WIDE_OPS,$RB_OPS --impls reducekit,torch.compile --budget-s 120 --out "$R/on" \
  >"$R/on.log" 2>&1
echo "on rc $? at $((SECONDS - T0)) s"
python3 bench/bench.py $S --ops $WIDE_OPS --impls reducekit --tune wide_rows=0 --out "$R/wide0" >"$R/wide0.log" 2>&1
echo "wide0 rc $? at $((SECONDS - T0)) s"
python3 bench/bench.py $S --ops $RB_OPS --impls reducekit --tune read_back_second=0 --out "$R/rb0" >"$R/rb0.log" 2>&1
echo "rb0 rc $? at $((SECONDS - T0)) s"
python3 - "$R" <<'PY'
import json, os, sys
R = sys.argv[1]
t = {}
for name in ("on", "wide0", "rb0"):
    p = f"{R}/{name}/results.json"
    if not os.path.exists(p): continue
    for r in json.load(open(p))["records"]:
        if r.get("gbps"):
            col = "compile" if r["impl"] == "torch.compile" else name
            t.setdefault((r["op"], r["dtype"], "x".join(map(str, r["shape"]))), {})[col] = r["gbps"]
cols = ("on", "wide0", "rb0", "compile")
print("op dtype shape " + " ".join(cols))
for k in sorted(t):
    print(*k, *[f"{t[k].get(c, 0):.0f}" for c in cols])
PY
