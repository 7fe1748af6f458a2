#!/usr/bin/env bash
# Warm call after wip/run_next.sh (its build kept): the sanitizer stage (initcheck must report 0),
# then the host-allocation A/B of exp-host-alloc (wip/host_alloc.patch; never run so far).
#   REDUCEKIT_JOBS=16 bash wip/run_next_san.sh
source scripts/remote_call.sh
source scripts/common.sh
set +e
REDUCEKIT_STAGES=san timeout 260 bash scripts/gpu_run.sh "$R" >"$R/san.log" 2>&1
echo "san rc $? at $((SECONDS - T0)) s"
grep -E "reports\)|ERROR SUMMARY" "$R/san.log" | head -12
packages=$(mktemp -d)
configure_and_build >"$R/build_a.log" 2>&1 || { tail -20 "$R/build_a.log"; exit 1; }
mkdir -p "$packages/a" "$packages/b" && cp -r python/reducekit "$packages/a/"
patch -p1 --quiet <wip/host_alloc.patch
start=$SECONDS
timeout 200 bash -c 'source scripts/common.sh; configure_and_build' >"$R/build_b.log" 2>&1 || { tail -5 "$R/build_b.log"; exit 1; }
echo "b built in $((SECONDS - start)) s"
cp -r python/reducekit "$packages/b/"
patch -p1 -R --quiet <wip/host_alloc.patch
for side in a b a b; do
  [ $((SECONDS - T0)) -gt 540 ] && break
  REDUCEKIT_PYTHON_PATH="$packages/$side" timeout 40 python3 bench/host_overhead.py --rounds 16 --out "$R/h$side" >>"$R/h_$side.log" 2>&1
  echo "== $side"; grep -E "^(softmax|layer_norm|sum|mean) .*reducekit" "$R/h_$side.log" | tail -8
done
