#!/bin/bash
# Every benchmark script, alternately on two checkouts of bayou (A/B), on one machine in one run:
#   benchmarks/ab.sh BEFORE_DIR AFTER_DIR OUTDIR [ROUNDS]
# e.g. git worktree add --detach /tmp/before e36b3b7 && benchmarks/ab.sh /tmp/before . /tmp/ab 3
# Each round runs BEFORE then AFTER, the next AFTER then BEFORE (spark and cluster: 2 rounds).
# Both sides use this checkout's .venv (and its Iggy SDK venvs, linked into BEFORE_DIR if missing)
# with PYTHONPATH pointing at their own src/. Then: python3 benchmarks/ab_table.py OUTDIR
set -u
BEFORE=$(cd "$1" && pwd); AFTER=$(cd "$2" && pwd); OUT=$3; ROUNDS=${4:-3}
PY=$AFTER/.venv/bin/python
mkdir -p "$OUT"
for v in .venv .venv-iggy08 .venv-iggy09; do
  [ -e "$BEFORE/$v" ] || ln -s "$AFTER/$v" "$BEFORE/$v"
done
declare -A ARGS=([metrics_bench]="--rounds 3" [cluster_bench]="--messages 500000 --rounds 3"
  [spark_bench]="--messages 1000000 --stream-messages 500000 --phases batch-read,stream-read,stream-e2e")
BENCHES=${BENCHES:-"storage_bench cursus_bench iggy_bench tank_bench rtes_bench sdk_bench authz_bench metrics_bench tls_bench cluster_bench spark_bench"}
for b in $BENCHES; do
  R=$ROUNDS; case $b in spark_bench|cluster_bench) R=2;; esac
  for r in $(seq 1 "$R"); do
    if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for side in $order; do
      if [ "$side" = before ]; then D=$BEFORE; else D=$AFTER; fi
      [ -f "$D/benchmarks/$b.py" ] || continue
      echo "$(date +%T) $b round $r $side (load $(cut -d' ' -f1 /proc/loadavg))" >> "$OUT/progress.txt"
      # shellcheck disable=SC2086
      (cd "$D" && PYTHONPATH=$D/src timeout 1500 "$PY" "benchmarks/$b.py" ${ARGS[$b]:-}) \
        > "$OUT/$b.$side.$r.txt" 2>&1
    done
  done
done
echo done >> "$OUT/progress.txt"
