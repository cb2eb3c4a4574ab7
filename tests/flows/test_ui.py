"""The Prefect UI is the front door: a user opens the ``hpo-job`` deployment's run form in a
real browser (Debian's Chromium, headless, driven by Playwright), fills the spec's fields,
submits, and finds the leaderboard on the finished run's page.

Screenshots of the form and of the finished run are kept under ``$ULTRON_TEST_ARTIFACTS`` (or
the test's temporary folder), printed at the end of the test.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pytest

from ultron.algorithms.registry import BUILTIN_STRATEGIES

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; a browser is never downloaded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (scripts/setup.sh)"),
]


def _field(page, label: str):
    """The innermost form property whose label is ``label`` (the spec itself is one too)."""
    title = page.locator(".schema-form-property__label", has_text=re.compile(f"^{label}$"))
    return page.locator(".schema-form-property", has=title).last


def _wait_for_end(server, run_id: str) -> str:
    from prefect.client.base import ServerType
    from prefect.client.orchestration import SyncPrefectClient

    deadline = time.monotonic() + 420  # the quickstart's 2 trials on a loaded machine
    with SyncPrefectClient(server.api_url, server_type=ServerType.SERVER) as client:
        while True:
            state = client.read_flow_run(uuid.UUID(run_id)).state
            if state is not None and state.is_final():
                return state.name
            assert time.monotonic() < deadline, f"the run is still {state}; {server.logs}"
            time.sleep(2)


def _run_of(server, name: str, page, shots: Path) -> str:
    """The flow run the form created: the one whose spec has the name typed in the form.

    The form stays on its page after Submit (the run appears through the API); on a loaded
    machine (CI runs two test workers on 2 cores) the server has taken a minute to create it,
    so the bound is a safety net, and a miss leaves a screenshot of the page after Submit.
    """
    from prefect.client.base import ServerType
    from prefect.client.orchestration import SyncPrefectClient

    deadline = time.monotonic() + 300
    with SyncPrefectClient(server.api_url, server_type=ServerType.SERVER) as client:
        while True:
            runs = client.read_flow_runs()
            mine = [r for r in runs if (r.parameters.get("spec") or {}).get("name") == name]
            if mine:
                assert len(mine) == 1
                assert mine[0].parameters["spec"]["num_iterations"] == 2
                assert mine[0].parameters["spec"]["strategy"] == "random"
                assert mine[0].parameters["spec"]["storage"].endswith("runs")
                return str(mine[0].id)
            if time.monotonic() > deadline:
                page.screenshot(path=str(shots / "after-submit.png"), full_page=True)
                pytest.fail(f"the form created no run: {shots / 'after-submit.png'}")
            time.sleep(1)


def _deployment_id(server) -> str:
    from prefect.client.base import ServerType
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(server.api_url, server_type=ServerType.SERVER) as client:
        return str(client.read_deployment_by_name("hpo-job/hpo-job").id)


def test_a_job_from_the_run_form_completes_with_its_leaderboard(
    prefect_server, tmp_path: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the dev extra")
    shots = Path(os.environ.get("ULTRON_TEST_ARTIFACTS", tmp_path)) / "ui"
    shots.mkdir(parents=True, exist_ok=True)
    name = f"ui-quickstart-{uuid.uuid4().hex[:6]}"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.set_default_timeout(60_000)
        page.goto(
            f"{prefect_server.url}/deployments/deployment/{_deployment_id(prefect_server)}/run"
        )
        page.wait_for_selector("text=Num Iterations (Optional)")

        # The form starts from the quickstart (prefect.yaml); a user names the job, picks the
        # strategy from its choice list and sets the budget.
        _field(page, re.escape("Name (Optional)")).locator("textarea").fill(name)
        strategy = _field(page, re.escape("Strategy (Optional)"))
        strategy.locator("button.p-select-button__control").press("ArrowDown")  # opens the list
        options = page.locator(".p-select-option__text")
        options.last.wait_for()
        assert options.all_inner_texts() == list(BUILTIN_STRATEGIES)
        options.filter(has_text=re.compile("^random$")).click()
        assert strategy.locator(".p-select-button__value").inner_text() == "random"
        _field(page, re.escape("Num Iterations (Optional)")).locator("input").fill("2")
        storage = _field(page, re.escape("Storage (Optional)")).locator("textarea")
        storage.fill(str(tmp_path / "runs"))  # not the default, a folder of the repository
        assert "Budget: number of trials" in page.inner_text("body")  # descriptions shown
        page.set_viewport_size({"width": 1400, "height": 2800})  # the form scrolls inside
        _field(page, re.escape("Name (Optional)")).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "form.png"))

        page.get_by_role("button", name="Submit").click()
        run_id = _run_of(prefect_server, name, page, shots)
        assert _wait_for_end(prefect_server, run_id) == "Completed"

        page.goto(f"{prefect_server.url}/runs/flow-run/{run_id}")
        page.get_by_text("Artifacts", exact=True).click()
        leaderboard = page.get_by_text(re.compile(f"^{name}-.*-leaderboard$")).first
        leaderboard.wait_for()  # the job's leaderboard table, on the run's page
        page.screenshot(path=str(shots / "finished-run.png"), full_page=True)
        browser.close()
    print(f"screenshots: {shots / 'form.png'} {shots / 'finished-run.png'}")
