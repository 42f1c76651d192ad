"""Which GPUs a machine offers and which are busy outside us, read from recorded nvidia-smi answers
(tests/data/nvidia_smi/SOURCES says where each came from) through a stand-in nvidia-smi on PATH, so
that the real subprocess is run. There is no GPU here."""

import os
import shlex
import time
from pathlib import Path

import pytest

from jupyter_trainer.core import gpus, nvidia_smi
from jupyter_trainer.core.gpus import offered_gpus, parse_gpu_list
from jupyter_trainer.core.nvidia_smi import busy_gpus, look_at_gpus, parse_gpus, parse_processes
from jupyter_trainer.errors import InvalidOption, TrainerError

DATA = Path(__file__).parent / "data" / "nvidia_smi"
GIB = 1 << 30
# The questions a stand-in answers: exactly the ones jupyter_trainer asks (anything else fails loudly).
GPU_QUESTION = "--query-gpu=index,uuid,memory.used,memory.total,mig.mode.current"
OLD_GPU_QUESTION = "--query-gpu=index,uuid,memory.used,memory.total"
APPS_QUESTION = "--query-compute-apps=gpu_uuid,pid,used_memory"


def stand_in(tmp_path, monkeypatch, gpu_answer, apps_answer="", gpu_code=0, apps_code=0, body=None):
    """An nvidia-smi first on PATH that prints a recorded file (or a text) for
    each question and exits with the code given; it notes each question it is asked in `asked`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    asked = tmp_path / "asked"

    def show(answer):
        return f"cat {shlex.quote(str(answer))}" if isinstance(answer, Path) else f"printf '%s' {shlex.quote(answer)}"

    script = body or (
        f'echo "$1" >> {shlex.quote(str(asked))}\n'
        '[ "$2" = "--format=csv,noheader,nounits" ] || { echo "stand-in: asked for $2"; exit 99; }\n'
        'case "$1" in\n'
        f"  {GPU_QUESTION}) {show(gpu_answer)}; exit {gpu_code} ;;\n"
        f"  {APPS_QUESTION}) {show(apps_answer)}; exit {apps_code} ;;\n"
        "esac\n"
        'echo "stand-in: asked $1"; exit 99\n'
    )
    program = bin_dir / "nvidia-smi"
    program.write_text("#!/bin/sh\n" + script)
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")  # its own tools (cat, sleep) from the system
    monkeypatch.delenv("JUPYTER_TRAINER_GPUS", raising=False)
    return asked


def recorded(tmp_path, monkeypatch, name):
    stand_in(tmp_path, monkeypatch, DATA / f"{name}.gpus", DATA / f"{name}.apps")
    return look_at_gpus()


def pids_in(name):
    return [int(line.split(",")[1]) for line in (DATA / f"{name}.apps").read_text().splitlines()]


# --- recorded machines -----------------------------------------------------------------------


def test_an_idle_machine_offers_all_its_gpus_and_none_is_busy(tmp_path, monkeypatch):
    look = recorded(tmp_path, monkeypatch, "a800-580.119.02-idle")
    assert offered_gpus(look=look) == gpus.Offered((0, 1), "nvidia-smi")
    assert busy_gpus(look) == frozenset()
    assert [(gpu.memory_used_bytes, gpu.memory_total_bytes, gpu.mig) for gpu in look.gpus] == [(0, 80 * GIB, False)] * 2


def test_a_gpu_with_a_foreign_compute_process_is_busy_and_one_with_only_ours_is_not(tmp_path, monkeypatch):
    """The poster's own test.py was pid 42152 (149 MiB on GPU 1); the others ran beside it."""
    name = "a100-mixed-510.47.03-load"
    look = recorded(tmp_path, monkeypatch, name)
    assert busy_gpus(look) == frozenset({0, 1})
    assert busy_gpus(look, own_pids=[42152]) == frozenset({0, 1})  # ours, but not alone on GPU 1
    assert busy_gpus(look, own_pids=pids_in(name)[1:]) == frozenset({0})  # one foreign process is enough
    assert busy_gpus(look, own_pids=pids_in(name)) == frozenset()  # 128 and 54 MiB held by no listed process
    assert len(look.processes) == len(pids_in(name)) and all(process.memory_bytes > 0 for process in look.processes)


def test_the_whole_api_runs_nvidia_smi_itself_when_given_no_look(tmp_path, monkeypatch):
    asked = stand_in(tmp_path, monkeypatch, DATA / "a100-mixed-510.47.03-load.gpus", DATA / "a100-mixed-510.47.03-load.apps")
    assert offered_gpus() == gpus.Offered((0,), "nvidia-smi", mig=(1,))
    assert busy_gpus() == frozenset({0, 1})
    assert asked.read_text().split() == [GPU_QUESTION, APPS_QUESTION] * 2


def test_na_process_memory_is_unknown_and_does_not_count_against_a_gpu(tmp_path, monkeypatch):
    """Synthetic: the busy machine's processes with their memory as [N/A]."""
    apps = (DATA / "a100-mixed-510.47.03-load.apps").read_text()
    na = "".join(line.rsplit(",", 1)[0] + ", [N/A]\n" for line in apps.splitlines())
    stand_in(tmp_path, monkeypatch, DATA / "a100-mixed-510.47.03-load.gpus", na)
    look = look_at_gpus()
    assert {process.memory_bytes for process in look.processes} == {None}
    assert busy_gpus(look) == frozenset({0, 1})
    assert busy_gpus(look, own_pids=pids_in("a100-mixed-510.47.03-load")) == frozenset()  # 23100 MiB used, none of it accountable


def test_a_gpu_in_mig_mode_is_not_offered_whole_unless_a_pool_names_it(tmp_path, monkeypatch):
    look = recorded(tmp_path, monkeypatch, "a100-mig-510.108.03-idle")
    assert [gpu.mig for gpu in look.gpus] == [True, True] and look.gpus[0].memory_used_bytes == 48 << 20
    assert offered_gpus(look=look) == gpus.Offered((), "nvidia-smi", mig=(0, 1))
    assert busy_gpus(look) == frozenset()  # MIG's own 45-48 MiB is not a job
    assert offered_gpus("1", look=look) == gpus.Offered((1,), "gpu_pool")
    busy = recorded(tmp_path / "load", monkeypatch, "a100-mixed-510.47.03-load")
    assert busy_gpus(busy, own_pids=[23824, 33724]) == frozenset({1})  # its instances' processes count against the whole GPU


# --- nvidia-smi failing --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, code, words",
    [("driver-mismatch-550.txt", 18, "Driver/library version mismatch NVML library version: 550.144")],
)  # fmt: skip
def test_an_nvidia_smi_that_fails_leaves_the_gpus_unknown_in_its_own_words(tmp_path, monkeypatch, name, code, words):
    asked = stand_in(tmp_path, monkeypatch, DATA / name, gpu_code=code)
    look = look_at_gpus()
    assert look.gpus is None and look.processes is None and words in look.problem
    offered = offered_gpus(look=look)
    assert offered.gpus is None and offered.source == "nvidia-smi" and offered.problem.startswith("nvidia-smi: Failed to initialize NVML")
    assert busy_gpus(look) is None
    assert asked.read_text().split() == [GPU_QUESTION]  # its processes are not asked for


@pytest.mark.parametrize("code", [6, 0])
def test_no_devices_found_is_a_machine_with_no_gpus(tmp_path, monkeypatch, code):
    stand_in(tmp_path, monkeypatch, DATA / "no-devices.txt", gpu_code=code)
    look = look_at_gpus()
    assert offered_gpus(look=look) == gpus.Offered((), "nvidia-smi") and busy_gpus(look) == frozenset()


def test_a_machine_without_nvidia_smi_offers_only_what_it_declares(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JUPYTER_TRAINER_GPUS", raising=False)
    look = look_at_gpus()
    assert not look.present and busy_gpus(look) == frozenset()
    assert offered_gpus() == gpus.Offered((), "none")
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-1")
    assert offered_gpus() == gpus.Offered((0, 1), "$JUPYTER_TRAINER_GPUS")


def test_a_hung_nvidia_smi_is_killed_with_what_it_started(tmp_path, monkeypatch):
    child = tmp_path / "child"
    stand_in(tmp_path, monkeypatch, "", body=f"sleep 100000 &\necho $! > {child}\nwait\n")
    started = time.monotonic()
    look = look_at_gpus(seconds=1.0)
    assert time.monotonic() - started < 5
    assert look.gpus is None and look.problem == "nvidia-smi did not answer within 1 s"
    assert busy_gpus(look) is None and offered_gpus(look=look).gpus is None
    with pytest.raises(ProcessLookupError):  # not left behind (waited for by its parent, now gone)
        for _ in range(50):
            os.kill(int(child.read_text()), 0)
            time.sleep(0.1)


def test_nvidia_smi_closing_its_output_but_going_on_is_killed(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, "", body="exec >&- 2>&-\nsleep 100000\n")
    look = look_at_gpus(seconds=1.0)
    assert look.gpus is None and look.problem == "nvidia-smi did not finish within 1 s"


@pytest.mark.parametrize("flood", ["yes junk", "yes '0, GPU-00000000-0000-0000-0000-000000000000, 1, 2, Disabled'", "head -c 3000000 /dev/urandom"])
def test_megabytes_from_nvidia_smi_leave_the_gpus_unknown_and_are_not_all_read(tmp_path, monkeypatch, flood):
    stand_in(tmp_path, monkeypatch, "", body=f"{flood}\n")
    started = time.monotonic()
    look = look_at_gpus()
    assert time.monotonic() - started < 5
    assert look.gpus is None and look.problem == "nvidia-smi's answer was longer than 64 KiB, which no real one is"


def test_garbage_from_nvidia_smi_is_unknown_not_a_crash(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, "\x1b[31m\x00<html>oops</html>\n\xff\xfe, , ,\n")
    look = look_at_gpus()
    assert look.gpus is None and "\x1b" not in look.problem and "oops" in look.problem
    assert offered_gpus(look=look).gpus is None and busy_gpus(look) is None


def test_garbage_process_lines_are_left_out_but_an_unreadable_pid_is_foreign(tmp_path, monkeypatch):
    apps = (
        "No running processes found\n"
        "GPU-00000000-0000-0000-0000-000000000000, [Insufficient Permissions], [N/A]\n"
        "GPU-00000000-0000-0000-0000-000000000000, 1e999, 12\n"
        "rm -rf /, 1, 2\n"
    )  # synthetic
    stand_in(tmp_path, monkeypatch, DATA / "a800-580.119.02-idle.gpus", apps)
    look = look_at_gpus()
    assert [process.pid for process in look.processes] == [None, None]
    assert busy_gpus(look, own_pids=[1]) == frozenset({0})


def test_an_unreadable_process_answer_leaves_busy_unknown_but_not_offered(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, DATA / "a800-580.119.02-idle.gpus", "Unable to determine the device handle\n", apps_code=15)  # synthetic
    look = look_at_gpus()
    assert offered_gpus(look=look) == gpus.Offered((0, 1), "nvidia-smi")
    assert busy_gpus(look) is None and look.problem == "nvidia-smi: Unable to determine the device handle"


def test_a_driver_without_mig_fields_is_asked_again_without_them(tmp_path, monkeypatch):
    """Synthetic: a driver before R450 knows no mig.mode.current (its refusal's words are real)."""
    asked = tmp_path / "asked"
    body = (
        f'echo "$1" >> {asked}\n'
        'case "$1" in\n'
        f"  {GPU_QUESTION}) echo 'Field \"mig.mode.current\" is not a valid field to query.'; exit 2 ;;\n"
        f"  {OLD_GPU_QUESTION}) echo '0, GPU-1b9f1c3a-7d2e-4c5b-9a8e-0f6d2c4b8a10, 3, 11178'; exit 0 ;;\n"
        f"  {APPS_QUESTION}) exit 0 ;;\n"
        "esac\nexit 99\n"
    )
    stand_in(tmp_path, monkeypatch, "", body=body)
    look = look_at_gpus()
    assert offered_gpus(look=look) == gpus.Offered((0,), "nvidia-smi") and busy_gpus(look) == frozenset()
    assert asked.read_text().split() == [GPU_QUESTION, OLD_GPU_QUESTION, APPS_QUESTION]


def test_several_gpus_are_told_apart_by_uuid(tmp_path, monkeypatch):
    """Synthetic four GPUs: a foreign process on 1, ours on 2, 18000 MiB unlisted on 3."""
    look = recorded(tmp_path, monkeypatch, "synthetic-4gpus")
    assert offered_gpus(look=look) == gpus.Offered((0, 1, 2, 3), "nvidia-smi")
    assert busy_gpus(look, own_pids=[5151]) == frozenset({1, 3})
    assert busy_gpus(look) == frozenset({1, 2, 3})
    assert busy_gpus(look, own_pids=[5151], busy_memory_mib=20000) == frozenset({1})


# --- pools ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, indices",
    [("0,1,2,3", (0, 1, 2, 3)), ("0-3", (0, 1, 2, 3)), ("0-1,4", (0, 1, 4)), (" 4 , 0 - 1 ", (0, 1, 4)), ("7", (7,)), ("2-2", (2,))],
)
def test_a_pool_names_gpus_by_index_or_range(text, indices):
    assert parse_gpu_list(text, "$JUPYTER_TRAINER_GPUS") == indices


@pytest.mark.parametrize(
    "text, says",
    [
        ("a", "is not a list of GPUs: write GPU indices like 0,1,2,3 or a range like 0-3 (or both: 0-1,4)"),
        ("0-", "is not a list of GPUs"),
        ("0,,1", "is not a list of GPUs"),
        ("-1", "is not a list of GPUs"),
        ("0;1", "is not a list of GPUs"),
        ("all", "is not a list of GPUs"),
        ("3-1", "has the range 3-1, which runs backwards: write 1-3"),
        ("1,1", "names GPU 1 twice"),
        ("0-2,2", "names GPU 2 twice"),
        ("2000", "names GPU 2000, more than any machine has"),
        ("0-9999", "names GPU 9999, more than any machine has"),
        ("1" * 500, "is not a list of GPUs"),
    ],
)
def test_a_bad_pool_is_one_line_saying_what_to_write(monkeypatch, text, says):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", text)
    with pytest.raises(InvalidOption) as raised:
        offered_gpus(look=nvidia_smi.SmiLook((), ()))
    message = str(raised.value)
    assert isinstance(raised.value, TrainerError) and says in message and "\n" not in message
    assert message.startswith(f"$JUPYTER_TRAINER_GPUS={text[:40]!r}") and len(message) < 200


def test_the_callers_pool_comes_before_the_environment_and_either_before_nvidia_smi(tmp_path, monkeypatch):
    asked = stand_in(tmp_path, monkeypatch, DATA / "a800-580.119.02-idle.gpus", DATA / "a800-580.119.02-idle.apps")
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-3")
    assert offered_gpus("5,6") == gpus.Offered((5, 6), "gpu_pool")
    assert offered_gpus() == gpus.Offered((0, 1, 2, 3), "$JUPYTER_TRAINER_GPUS")
    assert not asked.exists()  # nvidia-smi is not asked what a pool says
    with pytest.raises(InvalidOption, match=r"^gpu_pool='x' is not a list of GPUs"):
        offered_gpus("x")
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", " ")  # set but empty: as unset
    assert offered_gpus("") == gpus.Offered((0, 1), "nvidia-smi")


# --- the parsers alone ------------------------------------------------------------------------


def test_gpu_lines_that_are_not_plausible_are_left_out():
    uuid = "GPU-1b9f1c3a-7d2e-4c5b-9a8e-0f6d2c4b8a10"
    text = (
        f"0, {uuid}, 10, 20, Disabled\n"
        f"0, GPU-2c8e2d4b-8e3f-4d6c-8b9f-1e7c3d5a9b21, 10, 20, Disabled\n"  # index seen before
        f"1, {uuid}, 10, 20, Disabled\n"  # uuid seen before
        "2, not-a-uuid, 10, 20, Disabled\n"
        "1e308, GPU-3d7f3e5c-9f4a-4e7d-9cae-2f8d4e6bac32, 1, 2, Disabled\n"
        "3.5, GPU-3d7f3e5c-9f4a-4e7d-9cae-2f8d4e6bac32, 1, 2, Disabled\n"
        "4, GPU-4e6a4f6d-af5b-4f8e-adbf-3a9e5f7cbd43, [N/A], -5, Enabled\n"
        "5, GPU-4e6a4f6d-af5b-4f8e-adbf-3a9e5f7cbd44, 1, 2, Disabled, extra\n"
    )  # synthetic
    found = parse_gpus(text)
    assert [(gpu.index, gpu.memory_used_bytes, gpu.memory_total_bytes, gpu.mig) for gpu in found] == [(0, 10 << 20, 20 << 20, False), (4, None, None, True)]
    many = "".join(f"{index}, GPU-{index:08d}-0000-0000-0000-000000000000, 0, 1, Disabled\n" for index in range(40))
    assert len(parse_gpus(many)) == 16
    assert parse_processes("GPU-1b9f1c3a-7d2e-4c5b-9a8e-0f6d2c4b8a10, 12, 3\n" * 5000) == parse_processes("GPU-1b9f1c3a-7d2e-4c5b-9a8e-0f6d2c4b8a10, 12, 3\n" * 1024)
