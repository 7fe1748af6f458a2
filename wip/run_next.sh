#!/usr/bin/env bash
# First GPU call for branch exp-next-call (docs/branches.md): exp-readback-first-pass and
# exp-wide-packed together. Build, the norm tests (C++ and Python), then same-build A/Bs: 16-bit
# rms_norm / rms_norm_bias wide rows (packed where aligned) against `wide_rows=0`, torch.compile
# beside; the residual forms' read-back (first-pass s on shifted rows) against
# `read_back_second=0`. Results under $OUT/r, packed as $OUT/all.tgz. Then, within 30 s, the warm
# call wip/run_next_san.sh.
#   REDUCEKIT_JOBS=16 bash wip/run_next.sh
source scripts/remote_call.sh
source scripts/common.sh
set +e
configure_and_build >"$R/build.log" 2>&1 || { tail -30 "$R/build.log"; exit 1; }
echo "built at $((SECONDS - T0)) s"
lib=$(find "$BUILD" -name libreducekit.a | head -1)
echo "kernels in $lib: $(cuobjdump -res-usage "$lib" 2>/dev/null | grep -c 'Function ')"  # issue 19's kernel count
pids=()
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 120 "$BUILD/reducekit_tests" --gtest_brief=1 \
    --gtest_filter='*Norm*:*RowKernel*:*Tiles*:*Tuning*' >"$R/cpp$i.log" 2>&1 &
  pids+=($!)
done
timeout 120 python3 -m pytest -q tests/python/test_norm.py tests/python/test_transformer_block.py >"$R/py.log" 2>&1
echo "py rc $?: $(tail -1 "$R/py.log")"
for p in "${pids[@]}"; do wait "$p"; echo "cpp shard rc $?"; done
cat "$R"/cpp?.log >"$R/cpp.log" && rm -f "$R"/cpp?.log
grep -E "FAILED|PASSED" "$R/cpp.log" | sort | uniq -c | head
echo "tests done at $((SECONDS - T0)) s"
S="--no-plot --graph none --reps 50 --warmup 10"
WIDE="--ops rms_norm,rms_norm_bias --dtypes bf16,fp16 --shapes 4096x20000,4096x24576,4096x32768,2048x32768,8192x16392,4096x20001"
RB="--ops add_layer_norm,add_rms_norm --dtypes bf16,fp16 --shapes 2048x32767,2048x50257,4096x32768"
python3 bench/bench.py $S $WIDE --impls reducekit,torch.compile --budget-s 120 --out "$R/on" >"$R/on.log" 2>&1
python3 bench/bench.py $S $WIDE --impls reducekit --tune wide_rows=0 --out "$R/wide0" >"$R/wide0.log" 2>&1
python3 bench/bench.py $S $RB --impls reducekit --out "$R/rb" >"$R/rb.log" 2>&1
python3 bench/bench.py $S $RB --impls reducekit --tune read_back_second=0 --out "$R/rb0" >"$R/rb0.log" 2>&1
# float32 residual rows of an odd length (run 91: add_layer_norm 2048x50257 1599 GB/s, 50264 2550):
# the shipped held clusters against the streamed re-read rows
ODD="--ops add_layer_norm,add_rms_norm --dtypes fp32 --shapes 2048x50257,2048x50264,2048x32767"
python3 bench/bench.py $S $ODD --impls reducekit,torch --out "$R/odd" >"$R/odd.log" 2>&1
python3 bench/bench.py $S $ODD --impls reducekit --tune reread_above_words=16 --out "$R/odd_rr" >"$R/odd_rr.log" 2>&1
echo "bench done at $((SECONDS - T0)) s"
python3 - "$R" <<'PY'
import json, os, sys
R = sys.argv[1]
t = {}
for name in ("on", "wide0", "rb", "rb0", "odd", "odd_rr"):
    p = f"{R}/{name}/results.json"
    if not os.path.exists(p): continue
    for r in json.load(open(p))["records"]:
        if r.get("gbps"):
            col = {"torch.compile": "compile", "torch": "eager"}.get(r["impl"], name)
            t.setdefault((r["op"], r["dtype"], "x".join(map(str, r["shape"]))), {})[col] = r["gbps"]
cols = ("on", "wide0", "rb", "rb0", "odd", "odd_rr", "eager", "compile")
print("op dtype shape " + " ".join(cols))
for k in sorted(t):
    print(*k, *[f"{t[k].get(c, 0):.0f}" for c in cols])
PY
