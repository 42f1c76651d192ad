"""Decisions are made from typed state, never from words: no module of the package compares a status
by its value's text, reads a job's reason for words or compares it with a wording, or tells an
error by words in its text. (A backend reads its runtime's own words where it learns them: SageMaker's
failure reason in backends/sagemaker/reasons.py.)"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_trainer"
READS_ITS_RUNTIMES_REASON = {"backends/sagemaker/reasons.py"}
TEXT_METHODS = {"startswith", "endswith", "split", "rsplit", "partition", "rpartition", "find", "index", "count", "removeprefix"}


def named(node: ast.AST) -> str:
    """The last name of a Name or an Attribute ("" for anything else)."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def is_status_value(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "value" and "status" in named(node.value)


def is_reason(node: ast.AST) -> bool:
    return named(node) == "reason"


def is_text_of_an_error(node: ast.AST) -> bool:
    """`str(exc)`, `str(error)`: an error's text."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1):
        return False
    name = named(node.args[0]).lower()
    return name in ("e", "err", "exc", "exception") or name.endswith("error")


def words_read(source: str, may_read_reasons: bool) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(is_status_value(operand) for operand in operands):
                found.append((node.lineno, "a status compared by its value"))
            if any(isinstance(operand, ast.Attribute) and operand.attr == "reason" for operand in operands):
                found.append((node.lineno, "a reason compared"))
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and is_text_of_an_error(right):
                    found.append((node.lineno, "an error told by words in its text"))
                if isinstance(op, (ast.In, ast.NotIn)) and is_reason(right) and not may_read_reasons:
                    found.append((node.lineno, "words looked for in a reason"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TEXT_METHODS:
            if is_reason(node.func.value) and not may_read_reasons:
                found.append((node.lineno, "a reason read for words"))
    return found


def test_no_module_decides_by_words():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "backends/sagemaker/launcher.py":
            continue  # the training container's launcher: it writes SageMaker's words, and runs nothing of ours
        found += [f"{where}:{line}: {what}" for line, what in words_read(path.read_text(), where in READS_ITS_RUNTIMES_REASON)]
    assert found == []


def test_the_check_sees_each_kind_of_reading():
    """The check itself: each way of deciding by words is seen."""
    samples = {
        'icon = "check" if status.value == "completed" else "times"': "a status compared by its value",
        "shown = [r for r in rows if r.record.status.value == chosen]": "a status compared by its value",
        "if raised and latest.reason == describe_exit_code(latest.exit_code): pass": "a reason compared",
        'if "ValidationException" in str(error): pass': "an error told by words in its text",
        "message = reason.split('ErrorMessage \"', 1)[1] if 'ErrorMessage \"' in reason else reason": "words looked for in a reason",
        "first = job.reason.startswith('AlgorithmError')": "a reason read for words",
    }
    for source, what in samples.items():
        assert what in [said for _, said in words_read(source, may_read_reasons=False)], source
    assert words_read("if status is Status.COMPLETED and seen.reason_is_exit_code: pass", may_read_reasons=False) == []
