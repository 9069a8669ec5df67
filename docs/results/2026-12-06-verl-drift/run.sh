#!/usr/bin/env bash
# ABBA: the verl step-overhead benchmark on the code of 2026-12-01 evening (8786691, printed 1.18-1.20) and on main, interleaved
source ~/.cache/skillduet-ci/venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled RAY_USAGE_STATS_ENABLED=0 OMP_NUM_THREADS=1
i=0
for tag in old new new old; do
  i=$((i+1))
  if [ $tag = old ]; then dir=/work/drift-old; else dir=/work/me; fi
  echo "=== round $i $tag $(git -C $dir rev-parse --short HEAD) $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd $dir && PYTHONPATH=$dir python bench/verl_step_overhead.py --quick --steps 3 --consolidation-interval 10 --json /work/drift/$i-$tag.json 2>&1 | grep -v "^\s*$" | tail -25)
  echo "=== end $i $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
done
