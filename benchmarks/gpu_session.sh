#!/bin/bash
# Everything docs/BENCHMARKS.md quotes from a GPU, in one command sized for a short rental
# (about 7 minutes on an H200, compilation included; 2.5 more with Multi30k, so where a call is
# limited to 10 minutes, run the Multi30k part as a call of its own):
#   bash benchmarks/gpu_session.sh OUT [PREPARED_MULTI30K]
# OUT gets paper_runs.jsonl (base and big, each compiled as `attnlab train` compiles it and with
# CUDA graphs), profile_PRESET[_graphs].txt, kernels_PRESET[_graphs]/ (the code of the slowest
# compiled kernels, from Inductor's cache) and, given a prepared Multi30k
# directory (`attnlab data prepare multi30k --vocab-size 8000 --out DIR`), throughput.jsonl.
# Runs under the machine's own python3 and PyTorch (no install): the repository on PYTHONPATH.
set -u
out=${1:?usage: bash benchmarks/gpu_session.sh OUT [PREPARED_MULTI30K]}
data=${2:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
start=$(date +%s)
TORCH_LOGS=recompiles timeout 480 python3 benchmarks/gpu_paper_runs.py --json --variants dynamic graphs --profile "$out" \
  2> "$out/paper_runs.err" | tee "$out/paper_runs.jsonl"
echo "paper runs: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
grep -v "^USDT" "$out/paper_runs.err" | tail -8
for f in "$out"/profile_*.txt; do echo "== $f"; head -9 "$f"; done
if [ -n "$data" ]; then
  timeout 170 python3 benchmarks/train_throughput.py --device cuda --data "$data" --max-tokens 25000 \
    --presets base --dtypes bf16 --repeats 3 --min-seconds 1 --json 2> "$out/throughput.err" | tee "$out/throughput.jsonl"
  echo "train_throughput: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
  grep -v "^USDT" "$out/throughput.err" | tail -4
fi
