"""``ultron submit``: a job for a shared Prefect server. The code base travels through the
object store (moto's S3 server on loopback); the worker runs in a folder of its own and cannot
read the user's folder, which is moved away as soon as the run is created."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ultron.containerize.codebase import code_hash

REPO = Path(__file__).parents[2]
ULTRON = str(Path(sys.executable).with_name("ultron"))

pytestmark = pytest.mark.slow


def _user_folder(root: Path, storage: str) -> Path:
    user = root / "user"
    shutil.copytree(REPO / "tests" / "data" / "toy", user / "code")
    spec = {
        "name": "submitted",
        "code": "code",  # relative to the spec, on the user's machine only
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}, "y": [0.0, 1.0]},
        "num_iterations": 3,
        "storage": storage,
    }
    (user / "job.yaml").write_text(yaml.safe_dump(spec))
    return user


def _lines(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def test_submit_uploads_the_code_once_and_the_worker_runs_it_from_the_store(
    prefect_server, tmp_path: Path, s3_url: str, s3_storage_options: dict
) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_storage_options)
    storage = f"{s3_url}/{tmp_path.name}/runs"
    user = _user_folder(tmp_path, storage)
    submit = subprocess.Popen(
        [ULTRON, "submit", "job.yaml", "--wait"],
        cwd=user,
        env=prefect_server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert submit.stdout is not None
    printed = []
    for line in submit.stdout:  # until the run exists: the code base is in the store by then
        printed.append(line)
        if line.startswith("flow run: "):
            break
    hidden = tmp_path / "elsewhere"
    user.rename(hidden)  # the worker could only have the code base from the store
    out, err = submit.communicate(timeout=400)
    printed.append(out)
    text = "".join(printed)
    assert submit.returncode == 0, (text, err)
    fields = _lines(text)
    digest = code_hash(hidden / "code")
    archive = f"{storage}/code/{digest}.tar.gz"
    assert text.splitlines()[0] == f"uploaded code base to {archive}"
    assert fields["flow run"].startswith(f"{prefect_server.url}/runs/flow-run/")
    job_id = fields["job id"]
    assert f"{job_id}: Completed" in text  # --wait followed it to the end
    results = f"{storage}/{job_id}".removeprefix("s3://")
    assert json.loads(fs.cat(f"{results}/best.json"))["status"] == "completed"
    assert len(json.loads(fs.cat(f"{results}/trials.json"))) == 3

    hidden.rename(user)
    stored = fs.info(archive.removeprefix("s3://"))
    # Again, to a deployment the server lacks: the code base is not sent twice, and the wrong
    # name is one clean error (no second job runs).
    again = subprocess.run(
        [ULTRON, "submit", "job.yaml", "--deployment", "hpo-job/no-such"],
        cwd=user,
        env=prefect_server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2, (again.stdout, again.stderr)
    assert again.stdout.splitlines()[0] == f"code base unchanged, already at {archive}"
    assert "--deployment is 'hpo-job/no-such'" in again.stderr and "Fix:" in again.stderr
    assert "Traceback" not in again.stderr
    assert fs.ls(f"{storage}/code".removeprefix("s3://"), refresh=True) == [
        archive.removeprefix("s3://")
    ]
    assert fs.info(archive.removeprefix("s3://"), refresh=True)["ETag"] == stored["ETag"]
    assert fs.info(archive.removeprefix("s3://"))["LastModified"] == stored["LastModified"]
