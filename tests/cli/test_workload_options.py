"""Every command that takes a workload or a layout offers the same options, read from the CLI
itself: one name, one help text and one default each, from the one declaration of each group
(``WorkloadOptions``, ``LayoutOptions``)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import typer

from tensorledger.cli.main import app
from tensorledger.cli.workload import (
    LAYOUT_OPTIONS,
    WORKLOAD_OPTIONS,
    LayoutOptions,
    WorkloadOptions,
    shared_options,
)
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.spec import DEFAULTS

COMMANDS = ("trace", "memory", "roofline", "account")  # the workload and the layout
WORKLOAD_ONLY: tuple[str, ...] = ()
#: checkpoint declares its own --model (optional: or --deep) and offers no --checkpoint
CHECKPOINT_OWN = ("model", "checkpoint")


def _params(command: str) -> list[Any]:
    group = typer.main.get_command(app)
    return list(group.commands[command].params)  # type: ignore[attr-defined]


def _options(command: str, names: tuple[str, ...]) -> dict[str, tuple[object, ...]]:
    return {p.name: (tuple(p.opts), p.default, getattr(p, "help", None), p.is_flag, p.required)
            for p in _params(command) if p.name in names}


def test_the_same_workload_options_with_the_same_names_help_and_defaults() -> None:
    found = {command: _options(command, WORKLOAD_OPTIONS)
             for command in COMMANDS + WORKLOAD_ONLY + ("checkpoint",)}
    assert WORKLOAD_OPTIONS == ("model", "batch", "seq", "step", "precision", "optimizer",
                                "device", "checkpoint", "optimizer_kernel", "fill_defaults",
                                "lora", "lora_targets", "qlora", "offload",
                                "routing", "context", "attention")
    assert set(found["trace"]) == set(WORKLOAD_OPTIONS)
    assert found["trace"] == found["memory"] == found["roofline"] == found["account"]
    assert found["checkpoint"] == {name: spec for name, spec in found["trace"].items()
                                   if name not in CHECKPOINT_OWN} | {
        "model": found["checkpoint"]["model"]}
    assert found["trace"]["model"][4] is True  # required
    assert found["checkpoint"]["model"][4] is False  # its own: --model or --deep
    defaults = {name: spec[1] for name, spec in found["trace"].items() if name != "model"}
    assert defaults == {"batch": DEFAULTS.batch, "seq": DEFAULTS.seq, "step": DEFAULTS.step,
                        "precision": None, "optimizer": DEFAULTS.optimizer,
                        "device": DEFAULTS.device, "checkpoint": DEFAULTS.checkpoint,
                        "optimizer_kernel": DEFAULTS.optimizer_kernel, "fill_defaults": False,
                        "lora": None, "lora_targets": None,  # no adapters: full fine-tuning
                        "qlora": False, "offload": None,
                        "routing": None,  # balanced
                        "context": None,  # decode's cache: no default
                        "attention": "auto"}  # the kernel PyTorch picks on the target
    # None is the step's: language models train in bf16 autocast, and serve bf16 weights
    assert (DEFAULTS.precision, DEFAULTS.inference_precision) == ("mixed-bf16", "bf16")


def test_the_same_layout_options_with_the_resolvers_defaults() -> None:
    found = {command: _options(command, LAYOUT_OPTIONS) for command in COMMANDS}
    assert LAYOUT_OPTIONS == ("dp", "fsdp", "zero", "tp", "sp", "cp", "cp_rotate", "pp",
                              "microbatches", "schedule", "chunks", "stage_layers", "ep",
                              "etp")
    assert set(found["trace"]) == set(LAYOUT_OPTIONS)
    assert found["trace"] == found["memory"] == found["roofline"] == found["account"]
    # a second path: the defaults resolve_layout itself takes (1 everywhere: one device)
    resolver = inspect.signature(resolve_layout).parameters
    assert {name: spec[1] for name, spec in found["trace"].items()} == {
        name: resolver[name].default for name in LAYOUT_OPTIONS}
    assert not _options("checkpoint", LAYOUT_OPTIONS)


@pytest.mark.parametrize("command", COMMANDS + WORKLOAD_ONLY + ("checkpoint",))
def test_the_groups_stand_together_in_help_model_first(command: str) -> None:
    names = [p.name for p in _params(command)]
    assert names[0] == "model"  # the shared one, or checkpoint's own
    offered = [name for name in WORKLOAD_OPTIONS[1:] + LAYOUT_OPTIONS if name in names]
    start = names.index(offered[0])
    assert names[start:start + len(offered)] == offered


def _toy(**decorator: Any) -> tuple[typer.Typer, list[dict[str, Any]]]:
    """A one-command app whose command records what it was given."""
    seen: list[dict[str, Any]] = []

    @(shared_options(**decorator) if decorator else shared_options)
    def toy(*, name: str = "x", options: WorkloadOptions, parallel: LayoutOptions,
            last: int = 0) -> None:
        seen.append({"name": name, "options": options, "parallel": parallel, "last": last})

    toy_app = typer.Typer(add_completion=False)
    toy_app.command()(toy)
    toy_app.command("other")(lambda: None)  # two commands: each is called by name
    return toy_app, seen


def _run(toy_app: typer.Typer, *args: str) -> None:
    typer.main.get_command(toy_app).main(list(args), standalone_mode=False)


def test_a_command_gets_each_group_as_one_object() -> None:
    toy_app, seen = _toy()
    _run(toy_app, "toy", "--last", "3", "--tp", "2", "--model", "gpt2", "--batch", "4", "--sp")
    assert seen == [{"name": "x", "last": 3,
                     "options": WorkloadOptions(model="gpt2", batch=4),
                     "parallel": LayoutOptions(tp=2, sp=True)}]
    params = [p.name for p in typer.main.get_command(toy_app).commands["toy"].params]  # type: ignore[attr-defined]
    assert params == ["model", "name", *WORKLOAD_OPTIONS[1:], *LAYOUT_OPTIONS, "last"]


def test_a_command_declares_one_option_its_own_way_and_leaves_one_out() -> None:
    seen: list[Any] = []

    @shared_options(leave_out=("checkpoint",))
    def toy(*, model: str = "mine", options: WorkloadOptions) -> None:
        seen.append(options)

    toy_app = typer.Typer(add_completion=False)
    toy_app.command()(toy)
    command = typer.main.get_command(toy_app)
    assert [p.name for p in command.params] == ["model", *(n for n in WORKLOAD_OPTIONS[1:]
                                                         if n != "checkpoint")]
    command.main(["--seq", "8"], standalone_mode=False)
    assert seen == [WorkloadOptions(model="mine", seq=8, checkpoint=DEFAULTS.checkpoint)]


def test_a_command_cannot_leave_out_the_required_model_nor_take_no_group() -> None:
    def modelless(*, options: WorkloadOptions) -> None: ...

    with pytest.raises(TypeError, match="--model"):
        shared_options(leave_out=("model",))(modelless)

    def lonely(*, x: int = 1) -> None: ...

    with pytest.raises(TypeError, match="none of the option groups"):
        shared_options(lonely)


def test_every_optimizer_and_recipe_works_in_every_command(cli) -> None:  # type: ignore[no-untyped-def]
    from tensorledger.napkin import OPTIMIZERS, PRECISIONS

    for optimizer in OPTIMIZERS:
        for command in COMMANDS:
            result = cli(command, "--model", "tiny", "--seq", "8", "--optimizer", optimizer,
                         "--precision", "bf16-master", "--json")
            assert result.code == 0, (command, optimizer, result.stderr)
    for precision in PRECISIONS:
        result = cli("roofline", "--model", "tiny", "--seq", "8", "--optimizer", "lion",
                     "--precision", precision, "--json")
        assert result.code == 0, (precision, result.stderr)
        assert result.json()["precision"] == precision
