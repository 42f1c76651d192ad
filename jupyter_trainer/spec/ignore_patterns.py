"""Ignore files in the `.dockerignore` convention: which paths of a directory to leave out.

One pattern a line, relative to the directory (a leading `/` or `./` changes nothing); `#` starts a
comment line; `*` matches within one path segment, `?` one character of it, `[...]` a class, `**`
any number of segments; a pattern that matches a directory leaves out all it holds; `!PATTERN` takes
back what an earlier line left out, and the last line that matches a path decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PATTERNS = 10_000  # an ignore file is a short list written by hand, not data


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern
    include: bool  # a `!` line
    text: str


def _translate(pattern: str) -> re.Pattern:
    """A pattern's regular expression over a relative path with `/` separators."""
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            index += 2
            if pattern.startswith("/", index):  # `**/`: zero or more whole segments
                index += 1
                out.append(r"(?:[^/]*/)*")
            else:
                out.append(r".*")
            continue
        if char == "*":
            out.append(r"[^/]*")
        elif char == "?":
            out.append(r"[^/]")
        elif char == "[":
            end = pattern.find(
                "]", index + 2 if pattern.startswith("[!", index) or pattern.startswith("[^", index) else index + 1
            )
            if end < 0:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                index = end
        elif char == "\\" and index + 1 < len(pattern):
            index += 1
            out.append(re.escape(pattern[index]))
        else:
            out.append(re.escape(char))
        index += 1
    return re.compile("".join(out) + r"\Z")


def _clean(pattern: str) -> str:
    parts = [part for part in pattern.strip().split("/") if part not in ("", ".")]
    return "/".join(parts)


def parse(text: str) -> list[Pattern]:
    """The patterns of an ignore file; ValueError for one of more than MAX_PATTERNS lines."""
    lines = text.splitlines()
    if len(lines) > MAX_PATTERNS:
        raise ValueError(f"it has {len(lines):,} lines, more than the {MAX_PATTERNS:,} an ignore file may have")
    patterns = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        cleaned = _clean(line[1:] if include else line)
        if cleaned:
            try:
                patterns.append(Pattern(_translate(cleaned), include, cleaned))
            except re.error:
                continue  # a class no regular expression takes: matches nothing, as a typo would
    return patterns


class IgnoreRules:
    def __init__(self, patterns: list[Pattern]):
        self.patterns = patterns
        self.has_exceptions = any(pattern.include for pattern in patterns)
        # consecutive lines of one kind are one expression, tried last first: the first run that
        # matches holds the last matching line, which decides (a path costs a few matches, not one
        # per line)
        self.runs: list[tuple[bool, re.Pattern]] = []
        for pattern in patterns:
            if self.runs and self.runs[-1][0] == pattern.include:
                self.runs[-1][1].append(pattern.regex.pattern)
            else:
                self.runs.append((pattern.include, [pattern.regex.pattern]))
        self.runs = [
            (include, re.compile("|".join(f"(?:{body})" for body in bodies))) for include, bodies in self.runs
        ][::-1]

    def ignored(self, relative: str) -> bool:
        """Whether the path (relative, `/`-separated) is left out: by a pattern that matches it or
        one of the directories it lies in, unless a later `!` line matches."""
        leaves = [relative]
        parts = relative.split("/")
        leaves += ["/".join(parts[:end]) for end in range(1, len(parts))]
        for include, regex in self.runs:
            if any(regex.match(path) for path in leaves):
                return not include
        return False
