"""tests/conftest.py's choice to start the image build as an xdist session starts (before any collection),
and the wait on a build that another process started (tests/images/helpers.py)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.images.helpers import ROOT, wait_for_exit_file


def config(*args: str, quick=False, tier=None, keyword="", markexpr=""):
    options = {"quick": quick, "tier": tier}
    return SimpleNamespace(
        args=list(args),
        getoption=lambda name: options[name],
        option=SimpleNamespace(keyword=keyword, markexpr=markexpr),
        invocation_params=SimpleNamespace(dir=ROOT),
    )


@pytest.mark.parametrize(
    ("cfg", "reached"),
    [
        (config("tests/unit", "tests/infra", "tests/images", "tests/integration"), True),  # make test: testpaths
        (config("tests"), True),
        (config("tests/images/test_built_images.py::test_x"), True),
        (config("tests/integration"), True),  # the rehearsal is in it
        (config("tests/integration/test_ecs_verbs.py"), False),
        (config("tests/unit"), False),
        (config("tests", quick=True), False),
        (config("tests", tier=["local cluster"]), False),
        (config("tests", tier=["rehearsal"]), True),
        (config("tests", keyword="autostop"), False),
    ],
)
def test_the_build_starts_ahead_only_when_the_command_line_reaches_the_images(cfg, reached):
    assert conftest._may_reach_images(cfg) is reached


def test_a_worker_waits_for_the_exit_file_and_fails_with_the_logs_end(tmp_path):
    done = tmp_path / "ok"
    done.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(1); open({str(done / 'exit')!r}, 'w').write('0')"]
    )
    wait_for_exit_file(done)  # returns once the file says 0
    writer.wait()
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "build.log").write_text("step 1\nerror: no space left on device\n")
    (failed / "exit").write_text("1")
    with pytest.raises(AssertionError, match=r"(?s)exit 1.*no space left on device"):
        wait_for_exit_file(failed)
