from __future__ import annotations

import dataclasses

import pytest

from jupyter_trainer.backends import Backends, build_spec
from jupyter_trainer.backends.declaration import Declaration
from jupyter_trainer.backends.docker.declared import IMAGE
from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.spec.checks import parse_env, parse_gpus, parse_interpreter, parse_metrics
from jupyter_trainer.spec.options import ENV, INTERPRETER, WORKDIR, BackendOptions, DetachedBackend, Option

KEY = b"k" * 32


def spec(**overrides):
    options = dict(host=True, image=None, container=None, workdir=None, gpus=None, env=(), interpreter="python3")
    options.update(overrides)
    return build_spec(options.pop("script", "print(1)"), **options)


def test_env_parsing_keeps_values_with_equals():
    assert parse_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}


@pytest.mark.parametrize("item", ["NOEQUALS", "=v", "1A=v", "A B=v"])
def test_bad_env(item):
    with pytest.raises(InvalidOption):
        parse_env([item])


def test_bad_env_never_shows_the_value():
    with pytest.raises(InvalidOption) as info:
        parse_env(["BAD KEY=topsecret"])
    assert "topsecret" not in str(info.value)


@pytest.mark.parametrize("value", ["all", "1", "0,1", "2,3,5"])
def test_gpus(value):
    assert parse_gpus(value) == value


@pytest.mark.parametrize("value", ["", "most", "-1", "0,,1", "0;rm -rf /", "1.5"])
def test_bad_gpus(value):
    with pytest.raises(InvalidOption):
        parse_gpus(value)


def test_interpreter_is_split_like_a_shell_but_never_run_by_one():
    assert parse_interpreter("torchrun --nproc_per_node 2") == ("torchrun", "--nproc_per_node", "2")
    with pytest.raises(InvalidOption):
        parse_interpreter("   ")
    with pytest.raises(InvalidOption):
        parse_interpreter("python3 'unclosed")


def test_metrics():
    (metric,) = parse_metrics([r"loss=loss: ([0-9.]+)"])
    assert metric.name == "loss" and metric.compile().search("loss: 0.5").group(1) == "0.5"
    for bad in ["loss", "loss=([0-9]", "loss=no group", "loss=(a)(b)", "=(x)"]:
        with pytest.raises(InvalidOption):
            parse_metrics([bad])


def test_empty_cell_is_refused():
    with pytest.raises(InvalidOption, match="empty"):
        spec(script="  \n ")


def test_container_needs_image_or_container_and_host_takes_neither():
    with pytest.raises(InvalidOption, match="no image or container"):
        spec(host=False)
    with pytest.raises(InvalidOption, match="--host"):
        spec(host=True, image="python:3.11")
    with pytest.raises(InvalidOption):
        spec(host=False, image="bad image name")
    with pytest.raises(InvalidOption):
        spec(host=False, container="../etc")


def test_public_options_hold_env_keys_not_values():
    options = spec(env=["TOKEN=hunter2"]).public_options()
    assert options["env_keys"] == ["TOKEN"] and "hunter2" not in repr(options)


def test_fingerprint_tells_cells_apart():
    base = spec(env=["A=1"])
    assert base.fingerprint(KEY) == spec(env=["A=1"]).fingerprint(KEY)
    for other in (spec(env=["A=2"]), spec(script="print(2)", env=["A=1"]), spec(env=["A=1"], metrics=["m=(x)"])):
        assert other.fingerprint(KEY) != base.fingerprint(KEY)
    assert base.fingerprint(KEY, rerun=True) != base.fingerprint(KEY)
    assert base.fingerprint(b"x" * 32) != base.fingerprint(KEY)


def test_workdir_must_exist(tmp_path):
    with pytest.raises(InvalidOption, match="not a directory"):
        spec(workdir=str(tmp_path / "missing"))
    assert spec(workdir=str(tmp_path)).workdir == str(tmp_path)


def test_public_options_derive_from_the_fields_and_keep_secrets_out():
    from jupyter_trainer.backends import build_spec

    spec = build_spec(
        "print(1)\n", host=False, image="img:1", container=None, workdir="/tmp", gpus="all",
        env=["TOKEN=hunter2"], interpreter="torchrun --n 2", metrics=["loss=loss ([0-9.]+)"],
    )  # fmt: skip
    assert spec.public_options() == {
        "container": None, "env_keys": ["TOKEN"], "gpus": "all", "image": "img:1",
        "interpreter": ["torchrun", "--n", "2"], "metrics": [["loss", "loss ([0-9.]+)"]],
        "stop_container_when_done": False, "workdir": "/tmp",
    }  # fmt: skip  (the same as before options were derived: fingerprints of old cells hold)
    assert "hunter2" not in repr(spec) and "hunter2" not in str(spec.public_options())
    with_args = build_spec("print(1)\n", host=True, image=None, container=None, workdir="/tmp", gpus=None, args=["--epochs", "3"])
    assert with_args.public_options()["args"] == ["--epochs", "3"]


def test_every_detached_option_is_a_spec_field_a_switch_or_a_typed_option_of_its_backends():
    from dataclasses import fields

    from jupyter_trainer.backends import DEFAULT
    from jupyter_trainer.spec.job_spec import DetachedSpec

    declared = DEFAULT.detached
    held = {spec_field.name for spec_field in fields(DetachedSpec)}
    for option in declared.options:
        takers = [backend for backend in declared.backends if backend.takes(option.dest)]
        typed = [backend for backend in takers if option.dest in {own.name for own in fields(backend.typed)}]
        # --docker-host becomes the engine it chooses: the Docker backend's declared settle says so
        assert option.dest in held | declared.switches or typed == takers or option.dest == "docker_host", option.dest
    docker = declared.named("docker")
    assert set(docker.spec_fields({"docker_host": None, "workdir": "/tmp"}, {})) == {"engine", "workdir"}
    assert [backend for backend in declared.backends if backend.switch is None and backend.lacks] == []
    assert declared.default is docker  # one default backend


# A pretend backend is declared as a real one is (backends/*/declared.py) and handed to a registry.


@dataclasses.dataclass(frozen=True)
class RemoteOptions(BackendOptions):
    image: str | None = None
    lane: int | None = None


def remote_backends(*options, **declared) -> Backends:
    """A registry that knows, besides the real backends, --remote: a pretend backend that runs
    an image on a cluster, with `options` of its own."""
    remote = Option("remote", "--remote", "run on the cluster", kind="switch", config=True, default=False)
    detached = DetachedBackend(
        "remote", options=(IMAGE, WORKDIR, ENV, INTERPRETER, remote, *options), switch="remote",
        lacks="runs without a local container", typed=RemoteOptions, **declared,
    )  # fmt: skip
    return Backends(declared=(Declaration("remote", entry=object, detached=detached),))


def test_a_backend_declared_in_its_own_module_is_chosen_checked_and_configured():
    """A third detached backend, registered by injection: its switch, the options it takes and its
    needs are its declarations; choosing it, refusing what it does not take and the config rule
    follow from them."""
    backends = remote_backends(needs_one_of=("image",), missing=("no image for the cluster", "pass --image"))

    chosen = backends.build_spec("print(1)", remote=True, image="img:1", workdir="/tmp")
    assert chosen.backend == "remote" and chosen.options == RemoteOptions(image="img:1")
    with pytest.raises(InvalidOption, match="--remote runs without a local container") as refused:
        backends.build_spec("print(1)", remote=True, image="img:1", gpus="all")
    assert "--gpus" in refused.value.hint and "--image" not in refused.value.hint
    with pytest.raises(InvalidOption, match="no image for the cluster"):
        backends.build_spec("print(1)", remote=True)
    with pytest.raises(InvalidOption, match="cannot be given together"):
        backends.build_spec("print(1)", remote=True, host=True)
    # a configured switch applies unless a flag of an option its backend does not take is given
    config = {"remote": True, "image": "img:2", "gpus": "all"}
    assert backends.detached_spec("print(1)", {}, config).backend == "remote"
    assert backends.detached_spec("print(1)", {}, config).gpus is None  # docker's config does not reach it
    assert backends.detached_spec("print(1)", {"container": "box"}, config).backend == "docker"
    assert backends.detached_spec("print(1)", {"host": True}, config).backend == "host"
    with pytest.raises(TypeError, match="remote"):  # the real registry knows no --remote
        build_spec("print(1)", remote=True, image="img:1")


def test_an_option_of_a_switched_backend_given_without_its_switch_is_one_line():
    """--lane belongs to --remote alone: without --remote (the default backend chosen) it is one
    line naming the switch, never a crash; with another switch, a 0 is a value and refused too."""
    backends = remote_backends(Option("lane", "--lane", "the cluster's lane", "N", "int"))
    with pytest.raises(InvalidOption, match="--lane is an option of --remote") as refused:
        backends.build_spec("print(1)", image="img", lane=3)
    assert "add --remote, or drop --lane" in refused.value.hint
    with pytest.raises(InvalidOption, match="--lane is an option of --remote"):
        backends.build_spec("print(1)", host=True, workdir="/tmp", lane=0)
    with pytest.raises(InvalidOption, match="--host runs without a container") as lacking:
        backends.build_spec("print(1)", host=True, workdir="/tmp", image="img")
    assert "--lane" not in lacking.value.hint and "--remote" not in lacking.value.hint
    assert backends.build_spec("print(1)", remote=True, workdir="/tmp", lane=0).options == RemoteOptions(lane=0)


@pytest.mark.parametrize("flags", [{"stop_container_when_done": True}])
def test_a_configured_host_is_overridden_only_by_what_a_container_needs(flags):
    """--stop-container-when-done alone does not turn a configured --host job into a container
    job: it is refused, as --host does not take it; --image or --container do choose a container."""
    from jupyter_trainer.backends import detached_spec

    for config in ({"host": True}, {"host": True, "image": "cfg:1"}):
        with pytest.raises(InvalidOption, match="--host runs without a container"):
            detached_spec("print(1)", flags, config)
    assert detached_spec("print(1)", {**flags, "image": "img:2"}, {"host": True}).backend == "docker"


def test_gpus_and_a_queue_keep_a_configured_host_job_on_this_machine():
    """--host takes --gpus (a count is waited for in this machine's line) and --queue."""
    from jupyter_trainer.backends import detached_spec

    spec = detached_spec("print(1)", {"gpus": "2", "queue": "nightly"}, {"host": True})
    assert (spec.backend, spec.gpus, spec.queue) == ("host", "2", "nightly")
    with pytest.raises(InvalidOption, match="invalid --queue"):
        detached_spec("print(1)", {"queue": "../etc"}, {"host": True})


def test_a_switch_flagged_off_leaves_config_out():
    from jupyter_trainer.backends import detached_spec

    assert detached_spec("print(1)", {"host": False}, {"host": True, "image": "cfg:1"}).backend == "docker"


def test_a_backends_own_options_reach_its_spec_typed_and_are_stored_when_given():
    """Options no spec field holds reach the spec as the backend's typed options; the given ones
    are stored (and fingerprinted) under "backend_options", as an untyped dict of them was."""
    backends = remote_backends(Option("lane", "--lane", "a lane", "L"))
    given = backends.build_spec("print(1)\n", remote=True, workdir="/tmp", lane="fast")
    assert given.options == RemoteOptions(lane="fast") and given.public_options()["backend_options"] == {"lane": "fast"}
    other = backends.build_spec("print(1)\n", remote=True, workdir="/tmp", lane="slow")
    assert given.fingerprint(b"k") != other.fingerprint(b"k")  # another value, another cell
    plain = backends.build_spec("print(1)\n", remote=True, workdir="/tmp")
    assert "backend_options" not in plain.public_options()  # cells without any keep their fingerprints
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.options.lane = "slower"


def _tenfold(value):
    return value * 10


def test_an_options_check_may_live_in_its_backends_own_package():
    """`parse="module:function"`: a new backend keeps the check of its option in its own package,
    imported only when a value is checked (checks.py holds the shared ones)."""
    from jupyter_trainer.spec.job_spec import parse_declared

    option = Option("toy_nice", "--toy-nice", "how nice", kind="int", parse=f"{__name__}:_tenfold")
    assert parse_declared([option], {"toy_nice": 3, "other": "x"}) == {"toy_nice": 30, "other": "x"}


def test_another_backends_check_is_not_imported():
    """An option only a switched backend takes is checked (and its module imported) only when that
    backend is chosen: a --host cell never imports it."""
    import sys

    backends = remote_backends(Option("toy_nice", "--toy-nice", "how nice", kind="int", parse="jupyter_trainer_no_such_module:check"))
    built = backends.build_spec("print(1)\n", host=True, image=None, container=None, gpus=None, workdir=None)
    assert built.backend == "host" and "jupyter_trainer_no_such_module" not in sys.modules
    with pytest.raises(ModuleNotFoundError, match="jupyter_trainer_no_such_module"):  # it is named, and imported when chosen
        backends.build_spec("print(1)\n", remote=True, workdir="/tmp", toy_nice=3)
