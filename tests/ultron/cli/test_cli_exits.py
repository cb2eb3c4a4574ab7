"""One table of exit codes (ultron.cli.exits): each code from a real command, or from its type."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner, Result

from ultron.cli import exits
from ultron.cli.exits import ExitCode, code_for, fail
from ultron.cli.main import app
from ultron.errors import JobCancelledError, JobFailedError, ServiceUnreachableError

runner = CliRunner()


def _ultron(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_done_is_0() -> None:
    assert _ultron("--version").exit_code == ExitCode.DONE == 0


def test_a_job_that_failed_is_1() -> None:
    assert code_for(JobFailedError("3 of 4 trials failed")) == ExitCode.JOB_FAILED == 1


def test_bad_input_is_2(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\nparallelism: 0\n")
    result = _ultron("validate", str(spec))
    assert result.exit_code == ExitCode.BAD_INPUT == 2
    assert "parallelism" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", [["limits"], ["jobs"], ["status"], ["cache", "clear"]])
def test_a_redis_that_does_not_answer_is_3(command: list[str]) -> None:
    result = _ultron(*command, "--redis-url", "redis://127.0.0.1:1")
    assert result.exit_code == ExitCode.UNREACHABLE == 3, result.output
    # What is wrong: the Redis, not a job spec (there is none).
    assert "error: Redis is unreachable:" in result.output and "job spec" not in result.output
    assert "--redis-url is 'redis://127.0.0.1:1'" in result.output and "Fix:" in result.output
    assert "Traceback" not in result.output


def test_cancelled_is_128_plus_the_signal() -> None:
    assert code_for(JobCancelledError("x", signal_number=signal.SIGINT)) == 130
    assert code_for(JobCancelledError("x", signal_number=signal.SIGTERM)) == 143
    assert code_for(JobCancelledError("x", signal_number=signal.SIGHUP)) == 129
    assert code_for(JobCancelledError("x")) == ExitCode.CANCELLED_SIGTERM  # `ultron cancel`


def test_codes_follow_the_error_types() -> None:
    assert code_for(redis.ConnectionError("Error 111")) == ExitCode.UNREACHABLE
    assert code_for(redis.sentinel.MasterNotFoundError("no master")) == ExitCode.UNREACHABLE
    assert code_for(ConnectionRefusedError(111, "refused")) == ExitCode.UNREACHABLE
    assert code_for(ServiceUnreachableError([])) == ExitCode.UNREACHABLE  # a SpecError too
    assert code_for(RuntimeError("a bug")) == ExitCode.JOB_FAILED


def test_one_line_without_traceback_and_with_it_under_verbose(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer

    def failed() -> str:
        try:
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1")
        except redis.ConnectionError as exc:
            with pytest.raises(typer.Exit) as done:
                fail(exc)
        assert done.value.exit_code == ExitCode.UNREACHABLE
        return capsys.readouterr().err

    monkeypatch.setattr(exits._Verbose, "on", False)
    quiet = failed()
    assert quiet.strip() == "error: ConnectionError: Error 111 connecting to 127.0.0.1:1"
    exits.set_verbose(True)
    loud = failed()
    assert "Traceback (most recent call last)" in loud and loud.rstrip().endswith(quiet.strip())


def test_the_command_ends_an_unhandled_error_with_its_code() -> None:
    # The `ultron` command itself (main), on an error no command turned into a message.
    code = (
        "import sys, redis\n"
        "from ultron.cli.main import app, main\n"
        "@app.command('boom')\n"
        "def boom():\n"
        "    raise redis.ConnectionError('Error 111 connecting to 127.0.0.1:1')\n"
        "sys.argv = ['ultron', *sys.argv[1:]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "boom"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == ExitCode.UNREACHABLE, done.stderr
    assert done.stderr.strip() == "error: ConnectionError: Error 111 connecting to 127.0.0.1:1"
    verbose = subprocess.run(
        [sys.executable, "-c", code, "-v", "boom"], capture_output=True, text=True, timeout=120
    )
    assert verbose.returncode == 3 and "Traceback" in verbose.stderr
