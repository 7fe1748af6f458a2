export PYTHONUNBUFFERED=1
D=bench/_tmp_device
python3 $D/probe.py > $OUT/probe.log 2>&1
start=$(date +%s)
REDUCEKIT_PYTHON_PATH=$D/stub timeout 330 python3 -m pytest tests/python -q -rs -p no:cacheprovider --durations=30 --tb=short > $OUT/pytest.log 2>&1
echo "pytest rc=$? in $(( $(date +%s) - start )) s" | tee -a $OUT/pytest.log
tail -5 $OUT/pytest.log
start=$(date +%s)
REDUCEKIT_PYTHON_PATH=$D/stub timeout 220 python3 bench/bench.py --quick --seed-triton $D/seed_triton.py --out $OUT/quick > /dev/null 2>&1
echo "bench rc=$? in $(( $(date +%s) - start )) s"
tail -30 $OUT/quick/bench.log
