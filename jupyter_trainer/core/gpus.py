"""Which GPUs a machine offers.

Offered: the GPUs `nvidia-smi` lists, or, when set, those the caller's pool names (`%config
TrainerMagics.gpu_pool`) or else `$JUPYTER_TRAINER_GPUS` names: `0,1,2,3`, `0-3` or a mix like
`0-1,4`. A named pool is taken as it is (nvidia-smi is not asked), so a machine without nvidia-smi
can declare its GPUs too. A bad pool is one `InvalidOption` line saying what to write.

MIG: a GPU in MIG mode is not offered by nvidia-smi's list. CUDA would show a job handed it by
index one of its MIG instances only, not the whole GPU; `Offered.mig` names such GPUs so a
message can say why they are missing, and a pool that names one offers it anyway. MIG instances
themselves are never handed out.

What nvidia-smi says, and which GPUs are busy outside us: nvidia_smi.py.

* `offered_gpus(pool, look=...)` -> `Offered` (indices ascending, or None if unknown).
* `parse_gpu_list(text, where)` -> the indices a pool names (raises InvalidOption).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidOption
from .nvidia_smi import MAX_GPU_INDEX, SmiLook, look_at_gpus

ENV_VAR = "JUPYTER_TRAINER_GPUS"
_POOL_PART = re.compile(r"(\d{1,4})(?:\s*-\s*(\d{1,4}))?")


@dataclass(frozen=True)
class Offered:
    """The GPUs a machine offers: `gpus` ascending, or None if nvidia-smi could not tell (see
    `problem`). `source` names where they came from: "gpu_pool", "$JUPYTER_TRAINER_GPUS",
    "nvidia-smi", or "none" (no pool and no nvidia-smi). `mig`: GPUs left out for MIG mode."""

    gpus: tuple[int, ...] | None
    source: str
    mig: tuple[int, ...] = ()
    problem: str | None = None


def parse_gpu_list(text: str, where: str) -> tuple[int, ...]:
    """The GPU indices `text` names (`0,1,2,3`, `0-3`, `0-1,4`), ascending. `where` names the
    setting in the error (`$JUPYTER_TRAINER_GPUS`, `gpu_pool`)."""
    shown = f"{where}={text[:40]!r}"
    hint = "write GPU indices like 0,1,2,3 or a range like 0-3 (or both: 0-1,4)"
    found: set[int] = set()
    for part in text.split(","):
        match = _POOL_PART.fullmatch(part.strip())
        if not match:
            raise InvalidOption(f"{shown} is not a list of GPUs", hint)
        first = int(match[1])
        last = first if match[2] is None else int(match[2])
        if last < first:
            raise InvalidOption(f"{shown} has the range {first}-{last}, which runs backwards", f"write {last}-{first}")
        if last >= MAX_GPU_INDEX:
            raise InvalidOption(f"{shown} names GPU {last}, more than any machine has", hint)
        named = set(range(first, last + 1))
        if named & found:
            raise InvalidOption(f"{shown} names GPU {min(named & found)} twice", hint)
        found |= named
    return tuple(sorted(found))


def offered_gpus(
    pool: str | None = None, *, environ: Mapping[str, str] | None = None, look: SmiLook | None = None
) -> Offered:
    """What the machine offers: the caller's pool if set, else $JUPYTER_TRAINER_GPUS if set (an
    empty value counts as unset), else what nvidia-smi lists (`look`, or a look taken now)."""
    named = named_pool(pool, environ=environ)
    if named is not None:
        return named
    look = look_at_gpus() if look is None else look
    if not look.present:
        return Offered((), "none")
    if look.gpus is None:
        return Offered(None, "nvidia-smi", problem=look.problem)
    whole = tuple(sorted(gpu.index for gpu in look.gpus if not gpu.mig))
    return Offered(whole, "nvidia-smi", mig=tuple(sorted(gpu.index for gpu in look.gpus if gpu.mig)))


def named_pool(pool: str | None = None, *, environ: Mapping[str, str] | None = None) -> Offered | None:
    """The GPUs the caller's pool names, else $JUPYTER_TRAINER_GPUS (an empty value counts as
    unset); None when neither names any."""
    environ = os.environ if environ is None else environ
    for text, source in ((pool, "gpu_pool"), (environ.get(ENV_VAR), f"${ENV_VAR}")):
        if text is not None and text.strip():
            return Offered(parse_gpu_list(text, source), source)
    return None
