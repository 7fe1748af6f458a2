#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A same-call A/B of a source change on the GPU machine: builds the tree as it is (A) and keeps a
# copy of its Python package (the compiled operators inside), applies PATCH and rebuilds what it
# touches (B), then runs bench.py with the given arguments against A and B in turn, ROUNDS times
# (REDUCEKIT_AB_ROUNDS, default 2), and prints each point's median GB/s for both and B's change.
# The patch is reverted at the end. Logs and JSON: OUT_DIR/{a,b}{round}/. The two packages stay
# in REDUCEKIT_AB_PACKAGES/{a,b} where that is set (for more benchmarks in the same call).
#
#   bash scripts/ab.sh PATCH OUT_DIR --ops layer_norm --dtypes bf16 --shapes 4096x32768
#   (a patch from a branch: git diff main...BRANCH > ab.patch, kept in the tree for the call)
source "$(dirname "$0")/common.sh"
[ $# -ge 2 ] || { echo "usage: scripts/ab.sh PATCH OUT_DIR [bench.py arguments]" >&2; exit 2; }
patch_file="$(realpath "$1")"
out="$(mkdir -p "$2" && realpath "$2")"
shift 2
rounds="${REDUCEKIT_AB_ROUNDS:-2}"
packages="${REDUCEKIT_AB_PACKAGES:-$(mktemp -d)}"

# git apply works outside a repository too (the GPU machine's copy has no .git); patch otherwise.
apply() {
  if command -v git >/dev/null; then (cd "$REPO" && git apply "$@" "$patch_file")
  else (cd "$REPO" && patch -p1 --quiet "${@/--check/--dry-run}" <"$patch_file"); fi
}
patch_applied=0
restore() { if [ $patch_applied = 1 ]; then apply -R && patch_applied=0; fi; }
trap restore EXIT

build_into() {  # build the tree as it stands now, keep its package as $packages/$1/reducekit
  local start=$SECONDS
  configure_and_build >"$out/build_$1.log" 2>&1 || { tail -30 "$out/build_$1.log"; exit 1; }
  mkdir -p "$packages/$1" && cp -r "$REPO/python/reducekit" "$packages/$1/"
  echo "build $1: $((SECONDS - start)) s"
}
build_into a
apply --check >/dev/null || { echo "$patch_file does not apply to this tree" >&2; exit 1; }
apply && patch_applied=1
build_into b
restore

for ((r = 1; r <= rounds; ++r)); do
  for side in a b; do
    REDUCEKIT_PYTHON_PATH="$packages/$side" python3 "$REPO/bench/bench.py" --no-plot --out "$out/$side$r" "$@" \
      >"$out/$side$r.log" 2>&1 || { tail -20 "$out/$side$r.log"; exit 1; }
  done
done

python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def points(side):
    runs = {}
    for r in range(1, rounds + 1):
        for rec in json.load(open(f"{out}/{side}{r}/results.json"))["records"]:
            if rec.get("impl") == "reducekit" and rec.get("gbps"):
                key = (rec["op"], rec["dtype"], "x".join(map(str, rec["shape"])))
                runs.setdefault(key, []).append(rec["gbps"])
    return {k: statistics.median(v) for k, v in runs.items()}
a, b = points("a"), points("b")
print(f"A/B over {rounds} rounds, median GB/s (reducekit only)")
for key in sorted(a.keys() & b.keys()):
    print(*key, f"A {a[key]:.0f}  B {b[key]:.0f}  {100 * (b[key] / a[key] - 1):+.1f}%")
EOF
