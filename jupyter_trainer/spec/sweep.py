"""What a sweep asks for: `--sweep KEY=VALUES` (repeatable), read into the runs' parameters.

A grid: `--sweep lr=1e-3,3e-4 --sweep seed=0,1,2` is every combination, in the order given, the
last KEY varying fastest (lr=1e-3 seed=0, lr=1e-3 seed=1, ...). A value holding a comma is written
with a backslash before it (`--sweep tag=a\\,b,c`), or the values as a JSON list
(`--sweep 'tag=["a,b", "c"]'`).

A random search, with `--trials N`: a KEY may take a range, from which each of the N runs draws
its value (drawn again by the same sweep name: the same runs each time):

    KEY=loguniform(1e-5,1e-2)   log-uniform, for rates
    KEY=uniform(0,0.5)          uniform
    KEY=randint(1,8)            a whole number from 1 to 8
    KEY=choice(a,b,c)           one of the values

Other keys of the sweep (a list of values) are drawn from too, one of their values each run.

Each run gets its values as arguments after the script's own (`--KEY VALUE`), or, where the words
after `--` hold `{KEY}`, substituted there (`-- lr={lr}` for Hydra-style scripts). Values are text,
as given (drawn numbers: shortened to 6 significant digits, unless that leaves the range).

Pure logic: nothing here touches a job.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
import unicodedata

from ..errors import InvalidOption

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}")
RANGE = re.compile(r"(loguniform|uniform|randint|choice)\((.*)\)", re.S)
MAX_RUNS = 1000  # runs of one sweep: more is a mistake (a typo in a range), said before anything starts
MAX_VALUE_CHARS = 1000


def parse_axes(items: list[str] | None) -> list[tuple[str, object]]:
    """Each `--sweep KEY=VALUES`: (KEY, its values as a list of text, or a range as (kind, args))."""
    axes: list[tuple[str, object]] = []
    for item in items or ():
        key, sign, text = item.partition("=")
        key = key.strip()
        if not sign or not KEY.fullmatch(key):
            raise InvalidOption(
                f"--sweep expects KEY=V1,V2,...; got {item[:60]!r}",
                "for example --sweep lr=1e-3,3e-4 --sweep seed=0,1,2",
            )
        if any(key == seen for seen, _ in axes):
            raise InvalidOption(f"--sweep names {key} twice", "give each key once, with all its values")
        ranged = RANGE.fullmatch(text.strip())
        axes.append((key, _range(key, ranged[1], ranged[2]) if ranged else _values(key, text)))
    return axes


def _values(key: str, text: str) -> list[str]:
    text = text.strip()
    if text.startswith("["):
        try:
            listed = json.loads(text)
        except ValueError:
            raise InvalidOption(
                f"--sweep {key}=[...] is not a JSON list", 'write --sweep \'tag=["a,b", "c"]\''
            ) from None
        if not isinstance(listed, list) or not all(
            isinstance(value, (str, int, float)) and not isinstance(value, bool) for value in listed
        ):
            raise InvalidOption(f"--sweep {key}=[...] must list strings or numbers")
        values = [value if isinstance(value, str) else json.dumps(value) for value in listed]
    else:
        values = [part.replace("\\,", ",").strip() for part in re.split(r"(?<!\\),", text)]
    if not values or any(value == "" for value in values):
        raise InvalidOption(f"--sweep {key} has an empty value", f"list its values: --sweep {key}=V1,V2")
    if any(len(value) > MAX_VALUE_CHARS or "\0" in value for value in values):
        raise InvalidOption(f"--sweep {key} has a value longer than {MAX_VALUE_CHARS} characters, or a NUL")
    # a newline or an escape in a value would break the runs' table, and the terminal showing it
    odd = next((value for value in values if any(unicodedata.category(char) == "Cc" for char in value)), None)
    if odd is not None:
        raise InvalidOption(
            f"--sweep {key} has a value with a control character ({odd[:40]!r})",
            "give values on one line, without tabs or escapes",
        )
    if any(value in ("Infinity", "-Infinity", "NaN") for value in values) and text.startswith("["):
        raise InvalidOption(f"--sweep {key}=[...] has a number that is not finite")
    return values


def _range(key: str, kind: str, inside: str):
    parts = [part.strip() for part in inside.split(",")]
    if kind == "choice":
        return list(_values(key, inside))
    if len(parts) != 2:
        raise InvalidOption(
            f"--sweep {key}={kind}(...) takes two numbers, low and high", f"for example --sweep {key}={kind}(1,8)"
        )
    try:
        low, high = (int(part) if kind == "randint" else float(part) for part in parts)
    except ValueError:
        raise InvalidOption(
            f"--sweep {key}={kind}({inside[:40]}) takes {'whole ' if kind == 'randint' else ''}numbers"
        ) from None
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low or (kind == "loguniform" and low <= 0):
        need = "0 < low < high" if kind == "loguniform" else "low < high"
        raise InvalidOption(f"--sweep {key}={kind}({inside[:40]}) needs {need}")
    return (kind, low, high)


def runs_of(axes: list[tuple[str, object]], trials: int | None, seed_text: str) -> list[dict[str, str]]:
    """Each run's parameters, in order: the grid, or `trials` runs drawn at random (seeded by
    `seed_text`, the sweep's name: the same draws each time)."""
    if not axes:
        raise InvalidOption("--trials and --max-running go with --sweep", "add --sweep KEY=V1,V2,...")
    ranged = [key for key, values in axes if isinstance(values, tuple)]
    if trials is None:
        if ranged:
            raise InvalidOption(f"--sweep {ranged[0]} is a range: say how many runs to draw", "add --trials N")
        count = math.prod(len(values) for _, values in axes)
        _check_count(count)
        return [
            dict(zip((key for key, _ in axes), combination))
            for combination in itertools.product(*(values for _, values in axes))
        ]
    if trials < 1:
        raise InvalidOption(f"--trials {trials}: give 1 or more")
    _check_count(trials)
    draw = random.Random(int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "big"))
    return [{key: _drawn(draw, values) for key, values in axes} for _ in range(trials)]


def _check_count(count: int) -> None:
    if count > MAX_RUNS:
        raise InvalidOption(
            f"the sweep has {count} runs, more than {MAX_RUNS}", "sweep fewer values, or draw --trials N of them"
        )


def _drawn(draw: random.Random, values) -> str:
    if isinstance(values, list):
        return draw.choice(values)
    kind, low, high = values
    if kind == "randint":
        return str(draw.randint(low, high))
    value = math.exp(draw.uniform(math.log(low), math.log(high))) if kind == "loguniform" else draw.uniform(low, high)
    value = min(max(value, low), high)  # exp(log(x)) may differ from x in its last bit
    short = f"{value:.6g}"
    return short if low <= float(short) <= high else repr(value)  # bounds given finer than 6 digits


def run_arguments(args: tuple[str, ...], params: dict[str, str]) -> tuple[str, ...]:
    """The script's arguments for one run: `{KEY}` substituted where the arguments hold it (every
    key must then be placed), else `--KEY VALUE` after them."""
    placed = [key for key in params if any("{" + key + "}" in word for word in args)]
    if not placed:
        return (*args, *(word for key, value in params.items() for word in (f"--{key}", value)))
    missing = [key for key in params if key not in placed]
    if missing:
        raise InvalidOption(
            f"the arguments after -- place {{{placed[0]}}} but not {{{missing[0]}}}",
            "place every swept key ({KEY}), or none (each run then gets --KEY VALUE after the arguments)",
        )
    return tuple(_substituted(word, params) for word in args)


def _substituted(word: str, params: dict[str, str]) -> str:
    # in one pass: a value that holds "{KEY}" reaches the script as it is, not substituted again
    placeholder = re.compile("|".join(re.escape("{" + key + "}") for key in params))
    return placeholder.sub(lambda found: params[found[0][1:-1]], word)
