#!/usr/bin/env bash
# A warm call after wip/run_levers.sh (its build kept): host time with the adapters' outputs from
# at::detail::empty_cuda (branch exp-host-alloc, as wip/host_alloc.patch) against at::empty.
# Builds only what the patch touches (python/csrc), keeps both packages, and alternates
# bench/host_overhead.py between them: each side's op-minus-torch is read within its own run.
#   REDUCEKIT_JOBS=16 bash wip/run_host_alloc.sh
source scripts/remote_call.sh
source scripts/common.sh
packages=$(mktemp -d)
configure_and_build >"$R/build_a.log" 2>&1 || { tail -20 "$R/build_a.log"; exit 1; }
mkdir -p "$packages/a" "$packages/b" && cp -r python/reducekit "$packages/a/"
patch -p1 --quiet <wip/host_alloc.patch
start=$SECONDS
configure_and_build >"$R/build_b.log" 2>&1 || { tail -20 "$R/build_b.log"; exit 1; }
echo "b built in $((SECONDS - start)) s"
cp -r python/reducekit "$packages/b/"
patch -p1 -R --quiet <wip/host_alloc.patch
for side in a b a b; do
  REDUCEKIT_PYTHON_PATH="$packages/$side" python3 bench/host_overhead.py --rounds 16 --out "$R/h$side" >>"$R/h_$side.log" 2>&1
  echo "== $side"; grep -E "^(softmax|layer_norm|sum|mean) .*reducekit" "$R/h_$side.log" | tail -8
done
