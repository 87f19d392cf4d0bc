#!/usr/bin/env bash
# GPU readiness: the engine's tests and its benchmark on CUDA, in under 5 minutes, figures printed.
#
#   bash benchmarks/gpu_check.sh            # on a machine with an NVIDIA GPU and a CUDA build of torch
#
# Prints: prefill tok/s at 2,048 and 8,192 tokens, decode tok/s at 2k context, cached-prefix first-token
# speedup, and 8 concurrent requests sharing a 2k prefix (benchmarks/engine_bench.py, bfloat16 on CUDA).
# Without CUDA it says why and exits 2 after the checks that need no GPU (torch importable, the engine
# builds on CPU and answers through its fast path), so a CPU machine still tells you the script works.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=(uv run --extra engine python)
deadline=$((SECONDS + 290))
left() { echo $((deadline - SECONDS)); }

echo "== environment"
"${PY[@]}" - <<'PYEOF' || { echo "torch is not importable: install the engine extra (uv sync --extra engine)"; exit 2; }
import os, torch
print(f"torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}, "
      f"devices: {torch.cuda.device_count() if torch.cuda.is_available() else 0}, load average {os.getloadavg()[0]:.1f}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU 0: {p.name}, {p.total_memory / 2**30:.0f} GiB, bf16 supported: {torch.cuda.is_bf16_supported()}")
PYEOF

if ! "${PY[@]}" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== no CUDA device visible to torch: the GPU part is skipped"
  echo "   (a CPU build of torch, or no GPU; on a GPU machine install a CUDA build of torch into the environment)"
  echo "== CPU smoke check: the engine loads and answers on its fast path"
  timeout "$(left)" "${PY[@]}" - <<'PYEOF' || exit 1
from localengine import Engine
e = Engine(model="tiny-random", device="cpu")
r = e.generate([1, 2, 3, 4, 5], max_tokens=4, ignore_eos=True)
print(f"tiny-random on cpu ({e.kernels}): {len(r.token_ids)} tokens")
PYEOF
  exit 2
fi

echo "== engine tests on CUDA (tiny models run on the default device, cuda here)"
timeout "$(( $(left) - 200 ))" uv run --extra engine pytest tests/engine -q -x -p no:cacheprovider \
  || { echo "engine tests failed (or ran out of their time)"; status=1; }

echo "== engine benchmark on CUDA, bfloat16"
timeout "$(left)" "${PY[@]}" benchmarks/engine_bench.py --device cuda --dtype bfloat16 --quick --long \
  --no-transformers || { echo "benchmark failed (or ran out of time)"; exit 1; }
echo "== done in ${SECONDS}s"
exit "${status:-0}"
