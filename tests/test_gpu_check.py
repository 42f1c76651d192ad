"""benchmarks/gpu_check.sh, the check to run once on a machine with NVIDIA GPUs, run here through a
stand-in nvidia-smi: two idle GPUs, and as a compute process on a GPU any `sleep 6001` whose
CUDA_VISIBLE_DEVICES names it (the check's foreign process, GPU_HOG). No GPU is tried: this shows
the check itself works (its jobs, its waits, what it reads of nvidia-smi and of status --json),
so that it is ready where a GPU machine is."""

import os
import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).parent.parent / "benchmarks" / "gpu_check.sh"

STAND_IN = r"""#!/bin/sh
case "$1" in
  --query-gpu=*)
    echo "0, GPU-00000000-0000-0000-0000-000000000000, 0, 81920, Disabled"
    echo "1, GPU-00000000-0000-0000-0000-000000000001, 0, 81920, Disabled" ;;
  --query-compute-apps=*)
    for dir in /proc/[0-9]*; do
      [ "$(tr '\0' ' ' 2> /dev/null < "$dir/cmdline")" = "sleep 6001 " ] || continue
      gpu=$(tr '\0' '\n' 2> /dev/null < "$dir/environ" | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')
      echo "GPU-00000000-0000-0000-0000-00000000000$gpu, ${dir#/proc/}, 500"
    done ;;
  *) echo "stand-in: asked $1"; exit 99 ;;
esac
"""


def test_the_gpu_check_passes_on_a_stand_in_of_two_idle_gpus(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(STAND_IN)
    jt = bin_dir / "jupyter-trainer"  # this checkout's, on the tests' python
    jt.write_text(f"#!/bin/sh\nexec {sys.executable} -m jupyter_trainer \"$@\"\n")
    for program in (bin_dir / "nvidia-smi", jt):
        program.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(CHECK.parent.parent),
        "PYTHON": sys.executable,
        "GPU_HOG": "sleep 6001",
        "TMPDIR": str(tmp_path),
        "GPU_CHECK_WAIT": "60",
    }
    done = subprocess.run(["bash", str(CHECK)], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    lines = said.splitlines()
    assert lines[0] == "gpu_check: nvidia-smi lists 2 GPUs: 0 1", said
    assert "gpu_check: gc-c waits: waiting for 1 GPU; next in line (2 held by other jobs)" in lines, said
    assert "gpu_check: a process outside jupyter_trainer computes on GPU 0" in said
    assert any(line.startswith("gpu_check: gc-d (--gpus 2) waits: ") and "GPU 0 busy outside" in line for line in lines), said
    assert lines[-1] == "gpu_check: passed", said
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("gpu_check.")] == [], "its directory left behind"


def test_the_gpu_check_says_in_one_line_where_no_gpu_can_be_had(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["bash", str(CHECK)], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == "" and done.stderr == "gpu_check: FAILED: no nvidia-smi on PATH: run this where the GPUs are\n"
