"""The data service's own process: ``python -m ultron.datamanager.server_process CONFIG_JSON``.

It stages the data, starts the dispatcher and the service's own workers (none with
``placement: colocated``: each trial process runs one), writes ``service.json`` (address,
manifest path) into the work folder, and runs until its stdin closes: the job closes it in
``finalize``, and the operating system closes it when the job's process dies, so the service
never outlives its job. SIGTERM stops it the same way. Started again after a crash (with
``restart`` and the old ``port`` in the config), it keeps the staged data and its dispatcher
takes up its journal.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["main"]


def main(argv: list[str]) -> int:
    """Serve until stdin closes; 0 on a clean stop."""
    from ultron.datamanager.service import READY_FILE, LocalDataService, service_workers
    from ultron.datamanager.spec import DataSpec
    from ultron.datamanager.staging import MANIFEST_NAME, stage

    config: dict[str, Any] = json.loads(argv[0])
    spec = DataSpec.model_validate(config["spec"])
    work = Path(config["work_dir"])
    staged = work / "staged" / MANIFEST_NAME
    if config.get("restart") and staged.exists():  # started again: the job keeps its data
        manifest = json.loads(staged.read_text())
    else:
        manifest = stage(spec, base_dir=config["base_dir"], out_dir=work / "staged")
    service = LocalDataService(
        workers=service_workers(spec),
        host=spec.host,
        port=int(config.get("port", spec.port)),
        journal=work / "journal",
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=_wait_for_eof, args=(done,), daemon=True).start()
    info = {
        "address": service.address,
        "manifest": str(work / "staged" / MANIFEST_NAME),
        "rows": manifest["rows"],
        "pid": os.getpid(),
    }
    tmp = work / (READY_FILE + ".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, work / READY_FILE)
    print(f"data service ready: {json.dumps(info)}", flush=True)
    while not done.wait(0.5):
        pass
    service.stop()
    print("data service stopped", flush=True)
    return 0


def _wait_for_eof(done: threading.Event) -> None:
    while sys.stdin.buffer.read(4096):
        pass
    done.set()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
