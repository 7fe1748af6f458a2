# SPDX-License-Identifier: Apache-2.0
# Sourced by one-call GPU scripts (one-off, kept outside the tree), from the root: results go
# under $R = $OUT/r and leave as one file, $OUT/all.tgz, whatever ends the call (a remote call
# brings back at most 8 files). `summary` keeps a bench log's SUMMARY lines: plain timing whole,
# graph replay's as counts (its points are in the log; the call's output has 12,000 characters).
export PYTHONUNBUFFERED=1
T0=$SECONDS
R=$OUT/r
mkdir -p "$R"
finish() { (cd "$R" && tar czf "$OUT/all.tgz" --exclude='*.png' .); echo "end at $((SECONDS - T0)) s"; }
trap finish EXIT
summary() {
  grep -E "^(SUMMARY|copy ceiling)" | sed -E 's/^(SUMMARY .* graph replay: .* at [0-9]+\/[0-9]+).*/\1 (points in the log)/'
}
# Every C++ and Python GPU test (not the multi-GB cases): 4 C++ shards beside the Python files
# (the C++ shards alone take ~140 s; beside the Python files longer).
run_tests() {
  PYTEST_ADDOPTS='-m "not large"' REDUCEKIT_STAGES="cpp py" REDUCEKIT_TESTS_SIDE_BY_SIDE=1 REDUCEKIT_CPP_SHARDS=4 \
    REDUCEKIT_PY_PARALLEL=1 timeout 240 bash scripts/gpu_run.sh "$R"
  echo "tests rc $? at $((SECONDS - T0)) s"
}
