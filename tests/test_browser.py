"""The widget in a real JupyterLab, driven through headless Chromium by Playwright."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest
from conftest import IN_CI, REPO

CHROMIUM = os.environ.get("JUPYTER_TRAINER_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"

TRAINING_CELL = """%%train_detached --host --name browser-job --metric 'loss=loss: ([0-9.]+)'
import math, time
for step in range(40):
    print(f"step {step:3d} loss: {2 * math.exp(-step / 10) + 0.05 * math.sin(step):.4f}")
    time.sleep(0.15)
print("training done")
"""

# A job that puts markup where the widget shows its text: in its log, and in its record, where it
# names a backend that does not exist (the status check's error quotes the name). It waits to be
# released, then puts its record back and ends.
HOSTILE_CELL = """%%train_detached --host --name hostile-job
import json, os, time
print('epoch 1 <img src=x onerror="window.__jt_pwned=1">', flush=True)
print("</pre><script>window.__jt_pwned=1</script>", flush=True)
time.sleep(3)
record = os.path.join(os.path.dirname(os.path.abspath(__file__)), "record.json")

def replace(text):  # whole, as the store writes it
    with open(record + ".new", "w") as handle:
        handle.write(text)
    os.replace(record + ".new", record)

with open(record) as handle:
    original = handle.read()
print("rewriting the record", flush=True)
time.sleep(1)
payload = '<img src=x onerror="window.__jt_pwned=1"><script>window.__jt_pwned=1</script>'
replace(json.dumps({**json.loads(original), "backend": payload}))
for _ in range(600):
    if os.path.exists("release-hostile-job"):
        break
    time.sleep(0.1)
replace(original)
print("released", flush=True)
"""


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problem = "playwright is not installed"
    if not os.path.exists(CHROMIUM):
        problem = f"no Chromium at {CHROMIUM}"
    if shutil.which("jupyter-lab") is None and problem is None:
        problem = "jupyterlab is not installed"
    if problem:
        if IN_CI:
            pytest.fail(f"browser tests must run in CI: {problem}")
        pytest.skip(problem)

    root = tmp_path_factory.mktemp("lab")
    home = root / "trainer-home"
    port, token = _free_port(), secrets.token_hex(16)
    log = open(root / "jupyterlab.log", "wb")
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
            "--ServerApp.disable_check_xsrf=True",
        ],  # fmt: skip
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "JUPYTER_TRAINER_HOME": str(home)},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise AssertionError("JupyterLab did not start:\n" + (root / "jupyterlab.log").read_text()[-3000:])
            time.sleep(0.5)
    yield {"base": base, "token": token, "root": root, "home": home}
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()
    subprocess.run([sys.executable, "-m", "jupyter_trainer.cli", "stop", "browser-job"], env={**os.environ, "JUPYTER_TRAINER_HOME": str(home)}, capture_output=True)


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
            ],  # fmt: skip
        )
        yield instance
        instance.close()


def _open_notebook(browser, lab, name):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{lab['base']}/lab/tree/{name}?token={lab['token']}")
    # the lab reopens the notebooks of earlier pages too: wait until this one is the current tab
    page.wait_for_function(
        "([name]) => window.jupyterapp?.shell.currentWidget?.context?.path === name"
        " && window.jupyterapp.shell.currentWidget.sessionContext",
        arg=[name],
    )
    page.wait_for_function(
        "(() => { const w = window.jupyterapp.shell.currentWidget; const k = w.sessionContext.session?.kernel;"
        " return k && k.status === 'idle'; })()"
    )
    return page


def _command(page, command, args=None):
    # started, not awaited: a command's promise may outlive what the test waits for next
    page.evaluate("([c, a]) => { window.jupyterapp.commands.execute(c, a || {}); return null; }", [command, args])


def _run_cell(page, index):
    """Run one cell and wait until the kernel has executed it (its prompt gets a number)."""
    cell = f"window.jupyterapp.shell.currentWidget.content.widgets[{index}].model"
    page.evaluate(f"{cell}.executionCount = null")
    page.evaluate(f"window.jupyterapp.shell.currentWidget.content.activeCellIndex = {index}")
    _command(page, "notebook:run-cell")
    page.wait_for_function(f"{cell}.executionCount !== null")


def _kernel_id(page):
    return page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id")


def test_widget_in_jupyterlab(lab, browser):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_trainer"),
        nbformat.v4.new_code_cell(TRAINING_CELL),
        nbformat.v4.new_code_cell("%train_attach browser-job"),
    ]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, lab["root"] / "widget.ipynb")
    ARTIFACTS.mkdir(exist_ok=True)

    page = _open_notebook(browser, lab, "widget.ipynb")
    _run_cell(page, 0)
    _run_cell(page, 1)
    widget = page.locator(".jupyter-trainer-job").first
    widget.wait_for()
    page.wait_for_function(
        "document.querySelector('.jupyter-trainer-job .jt-log')?.textContent.includes('step   5')"
    )  # lines arrive while the job runs
    page.wait_for_function(
        "document.querySelector('.jupyter-trainer-job .jt-status')?.textContent === 'completed'", timeout=90_000
    )
    log_text = widget.locator(".jt-log").inner_text()
    assert "step  39" in log_text and "training done" in log_text
    assert widget.locator("svg.jt-chart polyline").count() == 1
    assert "loss" in widget.locator("svg.jt-chart").text_content()
    assert "exit code 0" in widget.inner_text()
    widget.screenshot(path=str(ARTIFACTS / "widget-completed.png"))
    page.screenshot(path=str(ARTIFACTS / "jupyterlab.png"))

    # the page is closed and opened again: the same kernel still shows the widget
    kernel = _kernel_id(page)
    _command(page, "docmanager:save")
    page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty")
    page.close()
    page = _open_notebook(browser, lab, "widget.ipynb")
    assert _kernel_id(page) == kernel
    page.locator(".jupyter-trainer-job .jt-status", has_text="completed").first.wait_for()
    assert "training done" in page.locator(".jupyter-trainer-job .jt-log").first.inner_text()

    # a new kernel finds the finished job again
    _command(page, "notebook:clear-all-cell-outputs")
    page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    page.wait_for_function(
        "(() => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel;"
        " return k && k.status === 'idle'; })()"
    )
    _run_cell(page, 0)
    _run_cell(page, 2)
    attached = page.locator(".jupyter-trainer-job").first
    attached.locator(".jt-status", has_text="completed").wait_for()
    assert "training done" in attached.locator(".jt-log").inner_text()
    assert attached.locator("svg.jt-chart polyline").count() == 1
    attached.screenshot(path=str(ARTIFACTS / "widget-attached-after-restart.png"))
    page.close()


def test_text_from_a_job_is_never_markup_in_jupyterlab(lab, browser):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("%load_ext jupyter_trainer"), nbformat.v4.new_code_cell(HOSTILE_CELL)]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, lab["root"] / "hostile.ipynb")
    ARTIFACTS.mkdir(exist_ok=True)
    release = lab["root"] / "release-hostile-job"

    page = _open_notebook(browser, lab, "hostile.ipynb")
    # the lab may show the other test's notebook too, in a hidden tab: look in this one only
    panel = "document.getElementById(window.jupyterapp.shell.currentWidget.id)"
    try:
        _run_cell(page, 0)
        _run_cell(page, 1)
        widget = page.locator(f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')} .jupyter-trainer-job")
        widget.wait_for()
        page.wait_for_function(
            f"{panel}.querySelector('.jupyter-trainer-job .jt-log')?.textContent.includes('rewriting the record')"
        )
        # the status check fails on the rewritten record: its error is shown (or, unescaped, run)
        page.wait_for_function(
            f"window.__jt_pwned !== undefined || [...{panel}.querySelectorAll('.jupyter-trainer-job .jt-error')]"
            ".some(line => line.textContent.includes('unknown backend'))",
            timeout=30_000,
        )
        widget.screenshot(path=str(ARTIFACTS / "widget-hostile-text.png"))
        assert page.evaluate("window.__jt_pwned") is None, "markup from the job ran in the page"
        assert widget.locator("img, script").count() == 0
        log_text = widget.locator(".jt-log").inner_text()
        assert '<img src=x onerror="window.__jt_pwned=1">' in log_text
        assert "</pre><script>window.__jt_pwned=1</script>" in log_text
        payload = '<img src=x onerror="window.__jt_pwned=1"><script>window.__jt_pwned=1</script>'
        error = widget.locator(".jt-error").inner_text()
        assert f"job 'hostile-job' uses the unknown backend '{payload}'" in error
        assert payload in widget.locator(".jt-header").inner_text()  # the backend's name, shown as it is
        assert widget.locator(".jt-status").inner_text() == "running"  # the widget goes on

        release.touch()  # the record is put back: the job ends, the error line goes
        page.wait_for_function(
            f"{panel}.querySelector('.jupyter-trainer-job .jt-status')?.textContent === 'completed'", timeout=60_000
        )
        assert widget.locator(".jt-error").count() == 0 and "released" in widget.locator(".jt-log").inner_text()
        assert page.evaluate("window.__jt_pwned") is None
        widget.screenshot(path=str(ARTIFACTS / "widget-hostile-completed.png"))
    finally:
        release.touch()
        page.close()
