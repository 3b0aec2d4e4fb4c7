"""A model factory that ends the process itself with ``os._exit`` is reported in one line and
exit code 2, not taken for success (issue 35): as a separate process, the way a user runs it,
since in-process the call would end the test run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorledger.errors import ModelError
from tensorledger.workload.factory import user_code
from tests.cli.hostile import make_hostile_files

_CLI = "import sys; from tensorledger.cli import main; sys.exit(main())"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _CLI, *args], capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize(("name", "command", "where"), [
    ("os_exit_in_factory.py", "trace", "the factory"),
    ("os_exit_in_forward.py", "memory", "a step of"),  # the user's `except Exception` too
])
def test_os_exit_is_one_line_and_exit_2(tmp_path: Path, name: str, command: str,
                                         where: str) -> None:
    path = make_hostile_files(tmp_path)[name]
    done = _run(command, "--model", f"{path}:make", "--batch", "1", "--seq", "8", "--json")
    lines = done.stderr.strip().splitlines()
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert len(lines) == 1 and lines[0].startswith("tensorledger: error: "), done.stderr
    assert where in lines[0] and "called os._exit(0)" in lines[0] and f"(at {name}:" in lines[0]


def test_os_exit_is_itself_again_once_user_code_has_run() -> None:
    real = os._exit
    with (pytest.raises(ModelError, match=r"^its step called os\._exit\(4\)"),
          user_code("the factory"), user_code("its step")):
        os._exit(4)
    with user_code("the factory"):
        with user_code("its step"):
            pass
        assert os._exit is not real  # still guarded while the outer guard is open
    assert os._exit is real and sys.modules[os.name]._exit is real


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_child_forked_by_user_code_still_ends_with_os_exit() -> None:
    real = os._exit
    with user_code("the factory"):
        pid = os.fork()
        if pid == 0:  # the child: os._exit(7) must end it; were it refused, 9 would
            try:
                os._exit(7)
            finally:
                real(9)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7
