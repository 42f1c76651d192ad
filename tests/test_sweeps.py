"""What a sweep asks for (spec/sweep.py): the grid and its order, values as given reaching the
script's arguments unchanged, {KEY} placed Hydra-style, ranges drawn the same for the same name and
within their bounds, and every bad input refused in one line. Pure: nothing runs."""

import math
import re

import pytest

from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.spec.sweep import MAX_RUNS, parse_axes, run_arguments, runs_of


def grid(*items, trials=None, name="s"):
    return runs_of(parse_axes(list(items)), trials, name)


def test_the_grid_is_every_combination_in_the_order_given_the_last_key_fastest():
    assert grid("lr=1e-3,3e-4", "seed=0,1,2") == [
        {"lr": "1e-3", "seed": "0"}, {"lr": "1e-3", "seed": "1"}, {"lr": "1e-3", "seed": "2"},
        {"lr": "3e-4", "seed": "0"}, {"lr": "3e-4", "seed": "1"}, {"lr": "3e-4", "seed": "2"},
    ]  # fmt: skip
    assert [list(run) for run in grid("b=1", "a=2")] == [["b", "a"]]  # the keys in the order given, not sorted


def test_values_holding_commas_quotes_equals_spaces_and_shell_syntax_are_kept_as_given():
    assert grid(r"tag=a\,b,c") == [{"tag": "a,b"}, {"tag": "c"}]
    assert grid('tag=["a,b", "c d", 3, 0.5]') == [{"tag": "a,b"}, {"tag": "c d"}, {"tag": "3"}, {"tag": "0.5"}]
    hostile = ["x=y", "it's", '"q z"', "$(touch pwned)", "`id`", "a;b|c&&d", "> out", "*", "~", "${HOME}", "é 中"]
    listed = "[" + ", ".join('"' + each.replace("\\", "\\\\").replace('"', '\\"') + '"' for each in hostile) + "]"
    assert [run["v"] for run in grid("v=" + listed)] == hostile
    assert [run["v"] for run in grid("v=x=y,it's,$(touch pwned);|&")] == ["x=y", "it's", "$(touch pwned);|&"]
    assert [run["v"] for run in grid("v=a b,  c  ")] == ["a b", "c"]  # words keep their spaces; the list's padding goes


def test_each_run_gets_its_values_after_the_scripts_own_arguments():
    params = {"lr": "1e-3", "tag": "a b;$(x)"}
    assert run_arguments(("--epochs", "3"), params) == ("--epochs", "3", "--lr", "1e-3", "--tag", "a b;$(x)")
    assert run_arguments((), {"x": "=y"}) == ("--x", "=y")


def test_keys_placed_in_the_arguments_are_substituted_there_hydra_style():
    params = {"lr": "0.01", "model": "resnet"}
    assert run_arguments(("lr={lr}", "model={model}", "+x=1"), params) == ("lr=0.01", "model=resnet", "+x=1")
    assert run_arguments(("{lr}-{lr}", "{model}"), params) == ("0.01-0.01", "resnet")


def test_a_value_that_looks_like_a_placeholder_is_not_substituted_again():
    # the value of a is the text "{b}": it reaches the script as that text, whatever b is
    assert run_arguments(("A={a}", "B={b}"), {"a": "{b}", "b": "x"}) == ("A={b}", "B=x")
    assert run_arguments(("A={a}", "B={b}"), {"b": "{a}", "a": "y"}) == ("A=y", "B={a}")


def test_placing_some_keys_but_not_all_is_refused_in_one_line():
    with pytest.raises(InvalidOption, match=r"place \{lr\} but not \{seed\}") as refused:
        run_arguments(("lr={lr}",), {"lr": "1", "seed": "0"})
    assert "\n" not in str(refused.value) and "none" in str(refused.value)


def test_ranges_are_drawn_the_same_for_the_same_sweep_name_and_within_their_bounds():
    items = ["lr=loguniform(1e-5,1e-2)", "drop=uniform(0,0.5)", "layers=randint(1,8)", "act=choice(relu,gelu\\,tanh)", "seed=0,1"]
    first = grid(*items, trials=200, name="search")
    assert first == grid(*items, trials=200, name="search")
    assert first != grid(*items, trials=200, name="search2")
    assert len(first) == 200
    lrs = [float(run["lr"]) for run in first]
    assert all(1e-5 <= lr <= 1e-2 for lr in lrs)
    # log-uniform: as many draws in each decade, not nearly all in the top one
    decades = [sum(10**-k <= lr < 10 ** (-k + 1) for lr in lrs) for k in (5, 4, 3)]
    assert min(decades) > 30, decades
    assert all(0 <= float(run["drop"]) <= 0.5 for run in first)
    assert {run["layers"] for run in first} == {str(n) for n in range(1, 9)}  # both ends included
    assert {run["act"] for run in first} == {"relu", "gelu,tanh"}
    assert {run["seed"] for run in first} == {"0", "1"}


@pytest.mark.parametrize("low, high", [("1.0000001", "1.0000002"), ("0.12345651", "0.1234566"), ("1e-7", "1.00000001e-7")])
def test_a_drawn_value_as_written_stays_within_bounds_given_finely(low, high):
    for kind in ("uniform", "loguniform"):
        for run in grid(f"x={kind}({low},{high})", trials=50, name=kind):
            assert float(low) <= float(run["x"]) <= float(high), (kind, run["x"])


def test_a_grid_of_exactly_the_most_runs_is_taken():
    assert len(grid("a=" + ",".join(map(str, range(10))), "b=" + ",".join(map(str, range(100))))) == MAX_RUNS


@pytest.mark.parametrize(
    "items, trials, words",
    [
        (["lr=1,2", "lr=3"], None, "names lr twice"),
        (["lr=1,,2"], None, "lr has an empty value"),
        (["lr="], None, "lr has an empty value"),
        (["lr=[]"], None, "lr has an empty value"),
        (['lr=[""]'], None, "lr has an empty value"),
        (["lr"], None, "expects KEY=V1,V2"),
        (["=1,2"], None, "expects KEY=V1,V2"),
        (["1lr=1"], None, "expects KEY=V1,V2"),
        (["lr=uniform(0,1)"], None, "lr is a range: say how many runs to draw: add --trials N"),
        (["a=" + ",".join(map(str, range(11))), "b=" + ",".join(map(str, range(100)))], None, "1100 runs, more than 1000"),
        (["a=1,2"], 1001, "1001 runs, more than 1000"),
        (["a=1,2"], 0, "--trials 0: give 1 or more"),
        ([], 3, "go with --sweep"),
        (["lr=uniform(1)"], 5, r"uniform\(...\) takes two numbers"),
        (["lr=uniform(1,2,3)"], 5, r"uniform\(...\) takes two numbers"),
        (["lr=uniform(2,1)"], 5, "needs low < high"),
        (["lr=uniform(1,1)"], 5, "needs low < high"),
        (["lr=uniform(nan,1)"], 5, "needs low < high"),
        (["lr=uniform(0,inf)"], 5, "needs low < high"),
        (["lr=loguniform(0,1)"], 5, "needs 0 < low < high"),
        (["lr=loguniform(-1,1)"], 5, "needs 0 < low < high"),
        (["lr=uniform(a,b)"], 5, "takes numbers"),
        (["n=randint(1.5,3)"], 5, "takes whole numbers"),
        (["lr=choice(a,,b)"], 5, "lr has an empty value"),
        (["lr=[1,"], None, "is not a JSON list"),
        (["lr=[true, 1]"], None, "must list strings or numbers"),
        (["lr=[[1], 2]"], None, "must list strings or numbers"),
        (["lr=" + "x" * 1001], None, "longer than 1000"),
    ],
)
def test_every_bad_sweep_is_one_clear_line(items, trials, words):
    with pytest.raises(InvalidOption) as refused:
        runs_of(parse_axes(items), trials, "s")
    said = str(refused.value)
    assert re.search(words, said), said
    assert "\n" not in said and len(said) < 300 and "Traceback" not in said


def test_a_json_object_is_not_taken_for_a_value():
    # {"a": 1} does not start with "[": it is one value, as given (no JSON read)
    assert grid('lr={"a": 1}') == [{"lr": '{"a": 1}'}]


def test_drawn_numbers_are_short():
    for run in grid("lr=loguniform(1e-5,1e-2)", "p=uniform(0,1)", trials=30, name="short"):
        for value in run.values():
            assert len(value) <= 12 and math.isfinite(float(value)), value
