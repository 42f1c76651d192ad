"""The widget in a real JupyterLab, driven through headless Chromium by Playwright."""

import contextlib
import json
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
record = os.path.join(os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode()), "record.json")

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


@contextlib.contextmanager
def _jupyter_server(module, *options, root, home, env=None):
    """A Jupyter server (`python -m module`) on a free port of 127.0.0.1, serving `root`; its output
    in a file beside it, stdin from /dev/null; stopped on leaving. `env`: more of its environment."""
    port, token = _free_port(), secrets.token_hex(16)
    log_path = root / f"{module}.log"
    # the lab's own settings: no offer of news (a toast over the outputs the screenshots show)
    settings = root / f"{module}-settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True, exist_ok=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    log = open(log_path, "wb")
    server = subprocess.Popen(
        [
            sys.executable, "-m", module, "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
            "--ServerApp.disable_check_xsrf=True", *options,
        ],  # fmt: skip
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "JUPYTER_TRAINER_HOME": str(home), "JUPYTERLAB_SETTINGS_DIR": str(settings), **(env or {})},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError(f"{module} did not start:\n" + log_path.read_text()[-3000:]) from None
                time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


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
    with _jupyter_server("jupyterlab", "--LabApp.expose_app_in_browser=True", root=root, home=home) as (base, token):
        yield {"base": base, "token": token, "root": root, "home": home}
    subprocess.run([sys.executable, "-m", "jupyter_trainer", "stop", "browser-job"], env={**os.environ, "JUPYTER_TRAINER_HOME": str(home)}, capture_output=True)


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
    current = (
        "([name]) => window.jupyterapp?.shell.currentWidget?.context?.path === name"
        " && window.jupyterapp.shell.currentWidget.sessionContext"
    )
    try:
        page.wait_for_function(current, arg=[name], timeout=30_000)
    except Exception:  # the tab the URL named left behind the ones restored (seen once on a loaded machine): opened by name
        page.wait_for_function("() => window.jupyterapp?.commands")
        _command(page, "docmanager:open", {"path": name})
        page.wait_for_function(current, arg=[name])
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


def _write_notebook(lab, name, *cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, lab["root"] / name)
    ARTIFACTS.mkdir(exist_ok=True)


def _kernel_id(page):
    return page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id")


def test_widget_in_jupyterlab(lab, browser):
    _write_notebook(lab, "widget.ipynb", "%load_ext jupyter_trainer", TRAINING_CELL, "%train_attach browser-job")

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
    widget.locator(".jt-log", has_text="training done").wait_for()  # the log's last update may follow the header's
    log_text = widget.locator(".jt-log").inner_text()
    assert "step  39" in log_text and "training done" in log_text
    assert widget.locator("svg.jt-chart polyline:visible").count() == 1
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
    assert attached.locator("svg.jt-chart polyline:visible").count() == 1
    attached.screenshot(path=str(ARTIFACTS / "widget-attached-after-restart.png"))
    page.close()


def test_text_from_a_job_is_never_markup_in_jupyterlab(lab, browser):
    _write_notebook(lab, "hostile.ipynb", "%load_ext jupyter_trainer", HOSTILE_CELL)
    release = lab["root"] / "release-hostile-job"

    page = _open_notebook(browser, lab, "hostile.ipynb")
    # the lab may show the other test's notebook too, in a hidden tab: look in this one only
    panel = "document.getElementById(window.jupyterapp.shell.currentWidget.id)"
    try:
        _run_cell(page, 0)
        _run_cell(page, 1)
        widget = page.locator(f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')} .jupyter-trainer-job:not(.jt-saved)")
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


# -- themes, the saved view, a restarted kernel -------------------------------------------------

KERAS_LIKE_CELL = """%%train_detached --host --name themed-job
import sys, time
for epoch in range(1, 4):
    print(f"Epoch {epoch}/3", flush=True)
    for step in range(1, 11):
        sys.stdout.write(f"\\r{step}/10 [{'=' * step}{'.' * (10 - step)}] - ETA: {10 - step}s - loss: {1 / (epoch * step):.4f}")
        sys.stdout.flush()
        time.sleep(0.05)
    print(f" - val_loss: {1.5 / epoch:.4f}", flush=True)
print("Traceback (most recent call last):")
print("KeyError: 'images'")
raise SystemExit(1)
"""


def _luminance(rgb):
    def channel(value):
        value /= 255
        return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

    red, green, blue = (channel(value) for value in rgb)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def _contrast(first, second):
    high, low = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


# the colour an element's text is drawn in (`fill` for SVG text), and the first opaque background
# behind it, as the browser computed them
COLOURS_OF = """(element) => {
    if (!element.isConnected) return null;  // re-rendered by an update meanwhile: its style is empty
    const parse = (value) => { const m = value.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
        const parts = m[1].split(',').map(Number); return parts.length > 3 && parts[3] === 0 ? null : parts.slice(0, 3); };
    const style = getComputedStyle(element);
    const text = element instanceof SVGElement ? parse(style.fill) : parse(style.color);
    let node = element, background = null;
    while (node && !background) { background = node instanceof Element ? parse(getComputedStyle(node).backgroundColor) : null;
        node = node.parentElement; }
    return [text, background || [255, 255, 255]];
}"""


def _set_theme(page, theme):
    _command(page, "apputils:change-theme", {"theme": theme})
    light = "true" if "Light" in theme else "false"
    page.wait_for_function(f"document.body.dataset.jpThemeLight === '{light}'", timeout=60_000)
    page.wait_for_timeout(500)  # the theme's stylesheet applied


def _in_both_themes(page, scope, selectors, path, shot=None, where="the {} theme", also=None):
    """Each theme in turn: a screenshot of `shot` (default `scope`) at `path` (its `{}` the theme's
    name), every selector's text in `scope` readable (4.5:1), and `also(name)`, what a test checks
    more in it."""
    for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        _set_theme(page, theme)
        scope.scroll_into_view_if_needed()
        _screenshot(shot or scope, path.format(name))
        for selector in selectors:
            ratio = _readable(scope, selector)
            assert ratio >= 4.5, f"{selector} in {where.format(name)}: contrast {ratio:.2f}"
        if also is not None:
            also(name)


def _screenshot(element, path):
    """A screenshot of a live view's element, which an update may replace while it is taken (a
    comparison's chart is drawn anew as its jobs write): taken again from the one there now."""
    for attempt in range(10):
        try:
            return element.screenshot(path=path)
        except Exception as error:  # playwright's Error: the element left the page under the shot
            if "not attached" not in str(error) or attempt == 9:
                raise
            element.page.wait_for_timeout(100)


def _readable(widget, selector):
    # the view's HTML is replaced on every update (the elapsed time ticks), so the element found may
    # be gone before its colours are read: read again from the one there now
    for _ in range(20):
        colours = widget.locator(selector).first.evaluate(COLOURS_OF)
        if colours is not None and colours[0] is not None:
            return _contrast(*colours)
        widget.page.wait_for_timeout(100)
    raise AssertionError(f"{selector}: no colours could be read (text {colours})")


def test_the_view_reads_well_in_the_light_and_the_dark_theme(lab, browser):
    _write_notebook(lab, "themes.ipynb", "%load_ext jupyter_trainer", KERAS_LIKE_CELL)
    page = _open_notebook(browser, lab, "themes.ipynb")
    panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
    try:
        _run_cell(page, 0)
        _run_cell(page, 1)
        widget = page.locator(f"{panel} .jupyter-trainer-job:not(.jt-saved)").first
        widget.wait_for()
        widget.locator(".jt-progress").wait_for(timeout=30_000)  # the bar's percentage while it runs
        assert "ETA" in widget.locator(".jt-progress").inner_text()
        widget.locator(".jt-status", has_text="failed").wait_for(timeout=90_000)
        assert "KeyError: 'images'" in widget.locator(".jt-header").first.inner_text()
        chart = widget.locator("svg.jt-chart").first
        assert chart.locator("polyline:visible").count() == 2  # loss and val_loss share one chart
        assert "epoch" in chart.locator(".jt-axis-title:visible").text_content()
        assert "val_loss" in chart.locator("rect.jt-hover title").last.text_content()  # what hovering shows
        _in_both_themes(page, widget, (".jt-log", ".jt-legend .jt-name", ".jt-chart .jt-axis-title", ".jt-header span"), str(ARTIFACTS / "widget-{}.png"))
    finally:
        _set_theme(page, "JupyterLab Light")
        page.close()


TABLE_JOB_CELL = """%%train_detached --host --name table-job --no-widget
import time
for step in range(5):
    print(f"step {step} loss: {1 / (step + 1):.4f}", flush=True)
time.sleep(600)
"""


def test_the_live_jobs_table_in_both_themes(lab, browser):
    _write_notebook(lab, "jobs-table.ipynb", "%load_ext jupyter_trainer", TABLE_JOB_CELL, "%train_jobs")
    page = _open_notebook(browser, lab, "jobs-table.ipynb")
    panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
    try:
        _run_cell(page, 0)
        _run_cell(page, 1)
        _run_cell(page, 2)
        table = page.locator(f"{panel} .jupyter-trainer-jobs").first
        row = table.locator(".jt-row", has_text="table-job").first
        row.locator(".jt-status", has_text="running").wait_for(timeout=30_000)
        row.locator(".jt-cell", has_text="loss 0.2").wait_for(timeout=30_000)  # the latest main metric
        # the text table's columns (fields.ROW_COLUMNS), the status a badge of its own
        cells = row.locator(".jt-cell").all_inner_texts()
        assert cells[:3] == ["table-job", "host", "-"] and cells[5] == "-" and cells[6] == "loss 0.2", cells
        _in_both_themes(page, table, (".jt-row .jt-cell", ".jt-head .jt-cell", ".jt-count"), str(ARTIFACTS / "jobs-table-{}.png"))
        _set_theme(page, "JupyterLab Light")
        # Attach shows the job's own view under the table
        row.locator(".jt-attach").click()
        view = table.locator(".jupyter-trainer-job:not(.jupyter-trainer-jobs)").first
        view.locator(".jt-log", has_text="step 4 loss").wait_for(timeout=30_000)
        # what the job uses, with a sparkline once there are two readings (one every 5 s)
        view.locator(".jt-usage", has_text="memory").wait_for(timeout=30_000)
        view.locator(".jt-usage svg.jt-spark").first.wait_for(timeout=30_000)
        view.locator(".jt-usage", has_text="CPU").wait_for(timeout=30_000)  # its share of a core: two readings
        for theme, name in (("JupyterLab Dark", "dark"), ("JupyterLab Light", "light")):
            _set_theme(page, theme)
            view.scroll_into_view_if_needed()
            view.screenshot(path=str(ARTIFACTS / f"widget-usage-{name}.png"))
            ratio = _readable(view, ".jt-usage")
            assert ratio >= 4.5, f"usage in the {name} theme: contrast {ratio:.2f}"
        # Stop from the row: the row then says stopped, and the filter finds it there
        row.locator(".jt-stop").click()
        row.locator(".jt-status", has_text="stopped").wait_for(timeout=60_000)
        table.locator(".widget-toggle-button", has_text="running").click()
        table.locator(".jt-row:not(.jt-head)", has_text="table-job").wait_for(state="detached")
        table.locator(".widget-toggle-button", has_text="stopped").click()
        table.locator(".jt-row", has_text="table-job").first.wait_for()
        table.screenshot(path=str(ARTIFACTS / "jobs-table-stopped.png"))
    finally:
        _set_theme(page, "JupyterLab Light")
        page.close()


def _shut_down_kernel(page):
    page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    page.wait_for_function("!window.jupyterapp.shell.currentWidget.sessionContext.session")


def test_a_reopened_notebook_shows_the_saved_view_not_model_not_found(lab, browser):
    cell = TRAINING_CELL.replace("browser-job", "saved-job").replace("range(40)", "range(8)")
    _write_notebook(lab, "saved.ipynb", "%load_ext jupyter_trainer", cell)
    page = _open_notebook(browser, lab, "saved.ipynb")
    _run_cell(page, 0)
    _run_cell(page, 1)
    panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
    live = page.locator(f"{panel} .jupyter-trainer-job:not(.jt-saved)")
    live.locator(".jt-status", has_text="completed").wait_for(timeout=90_000)
    saved = page.locator(f"{panel} .jt-saved")
    assert saved.count() == 1 and not saved.is_visible()  # the live view is shown, its copy is not
    page.wait_for_function(  # the copy is brought up to date at the end
        f"document.querySelector('{panel} .jt-saved .jt-status')?.textContent === 'completed'"
    )
    _command(page, "docmanager:save")
    page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty")
    _shut_down_kernel(page)
    page.close()

    page = _open_notebook(browser, lab, "saved.ipynb")  # the next day: a new kernel, no widget models
    panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
    saved = page.locator(f"{panel} .jt-saved")
    saved.wait_for()
    page.wait_for_timeout(2000)  # the widget manager has given up on the old model by now
    assert saved.is_visible() and "completed" in saved.locator(".jt-status").inner_text()
    text = saved.inner_text()
    assert "training done" in text and "%train_attach saved-job" in text and "Run this cell again" in text
    assert saved.locator("svg.jt-chart polyline:visible").count() == 1
    # its chart's controls work in the copy, with no kernel behind it: no script, only its own CSS
    assert saved.locator(".jt-chart-controls").first.is_visible() and not _shown(saved.locator(".jt-sm2").first)
    saved.locator("label.jt-pick-s2").first.click()
    assert _shown(saved.locator(".jt-sm2").first)
    saved.locator("label.jt-pick-s0").first.click()
    assert not _shown(saved.locator(".jt-sm2").first)
    errors = page.get_by_text("Error displaying widget")
    assert all(not errors.nth(index).is_visible() for index in range(errors.count()))
    page.locator(f"{panel} .jp-Cell").nth(1).screenshot(path=str(ARTIFACTS / "widget-saved-view.png"))
    # running the cell again brings the live view back, and attaches rather than trains again
    _run_cell(page, 0)
    _run_cell(page, 1)
    live = page.locator(f"{panel} .jupyter-trainer-job:not(.jt-saved)")
    live.locator(".jt-status", has_text="completed").wait_for()
    assert not page.locator(f"{panel} .jt-saved").first.is_visible()
    page.close()


def test_after_a_kernel_restart_the_old_view_says_it_is_disconnected(lab, browser):
    cell = "%%train_detached --host --name long-job\nimport time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(1)\n"
    _write_notebook(lab, "restart.ipynb", "%load_ext jupyter_trainer", cell)
    page = _open_notebook(browser, lab, "restart.ipynb")
    env = {**os.environ, "JUPYTER_TRAINER_HOME": str(lab["home"])}
    try:
        _run_cell(page, 0)
        _run_cell(page, 1)
        panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
        widget = page.locator(f"{panel} .jupyter-trainer-job:not(.jt-saved)").first
        widget.locator(".jt-status", has_text="running").wait_for()
        assert not widget.locator(".jt-disconnected").is_visible()
        page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
        page.wait_for_function(f"document.querySelector('{panel} .jupyter-trainer-job.jupyter-widgets-disconnected')")
        notice = widget.locator(".jt-disconnected")
        assert notice.is_visible() and "%train_attach long-job" in notice.inner_text()
        button = widget.locator(".jt-stop")
        assert button.evaluate("b => getComputedStyle(b).pointerEvents") == "none"
        assert float(button.evaluate("b => getComputedStyle(b).opacity")) < 0.5
        widget.screenshot(path=str(ARTIFACTS / "widget-disconnected.png"))
    finally:
        subprocess.run([sys.executable, "-m", "jupyter_trainer", "stop", "long-job"], env=env, capture_output=True)
        page.close()


# every Notification the page shows, kept where the test can read it (headless Chromium shows none)
RECORD_NOTIFICATIONS = """
window.__jt_notes = [];
const Real = window.Notification;
class Recorded extends Real {
    constructor(title, options) { super(title, options); window.__jt_notes.push([title, options && options.body]); }
}
window.Notification = Recorded;
"""


def test_the_browser_tells_when_a_job_ends_once(lab, browser):
    cell = TRAINING_CELL.replace("browser-job", "bell-job").replace("range(40)", "range(20)")
    _write_notebook(lab, "bell.ipynb", "%load_ext jupyter_trainer", cell)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.add_init_script(RECORD_NOTIFICATIONS)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{lab['base']}/lab/tree/bell.ipynb?token={lab['token']}")
    page.wait_for_function(
        "window.jupyterapp?.shell.currentWidget?.context?.path === 'bell.ipynb'"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle'"
    )
    try:
        _run_cell(page, 0)
        _run_cell(page, 1)
        panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
        bell = page.locator(f"{panel} .jupyter-trainer-job:not(.jt-saved) .jt-bell")
        bell.wait_for()  # offered while the job runs, the browser not asked yet
        assert page.evaluate("document.body.dataset.jtNotify") == "default"
        context.grant_permissions(["notifications"])
        bell.click()  # the user allows it
        page.wait_for_function("document.body.dataset.jtNotify === 'granted'")
        page.locator(f"{panel} .jupyter-trainer-job:not(.jt-saved) .jt-status", has_text="completed").wait_for(timeout=90_000)
        page.wait_for_function("window.__jt_notes.length > 0")
        page.wait_for_timeout(2000)
        assert page.evaluate("window.__jt_notes") == [["bell-job completed", "exit code 0"]]
        _command(page, "docmanager:save")
        page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty")
        page.reload()  # the saved copy is drawn again: no second notification
        page.wait_for_function("window.jupyterapp?.shell.currentWidget?.context?.path === 'bell.ipynb'")
        page.locator(".jt-saved").first.wait_for(state="attached")
        page.wait_for_timeout(3000)
        assert page.evaluate("window.__jt_notes") == []
    finally:
        context.close()


@pytest.fixture(scope="module")
def notebook7(lab):
    """Notebook 7 on the same root and job store as the lab."""
    with _jupyter_server("notebook", "--JupyterNotebookApp.expose_app_in_browser=True", root=lab["root"], home=lab["home"]) as (base, token):
        yield {"base": base, "token": token}


def test_the_view_in_notebook_7_in_both_themes(lab, notebook7, browser):
    cell = KERAS_LIKE_CELL.replace("themed-job", "nb7-job")
    _write_notebook(lab, "nb7.ipynb", "%load_ext jupyter_trainer", cell)
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{notebook7['base']}/notebooks/nb7.ipynb?token={notebook7['token']}")
    page.wait_for_function(
        "window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'"
    )
    try:
        _run_cell(page, 0)
        _run_cell(page, 1)
        widget = page.locator(".jupyter-trainer-job:not(.jt-saved)").first
        widget.locator(".jt-status", has_text="failed").wait_for(timeout=90_000)
        assert "KeyError: 'images'" in widget.locator(".jt-header").first.inner_text()
        assert widget.locator("svg.jt-chart polyline:visible").count() == 2
        assert not page.locator(".jt-saved").first.is_visible()
        _in_both_themes(page, widget, (".jt-log", ".jt-legend .jt-name", ".jt-header span"), str(ARTIFACTS / "notebook7-{}.png"), where="Notebook 7's {} theme")
    finally:
        _set_theme(page, "JupyterLab Light")
        page.close()


REMOTE_CELL = """%%train_detached --docker-host {url} --image {image} --name remote-view
import time
for step in range(600):
    print(f"step {{step:3d}} loss: {{1 / (step + 1):.4f}}", flush=True)
    time.sleep(0.5)
"""


def test_a_remote_job_while_its_host_cannot_be_reached(lab, browser, docker_client, tmp_path):
    """A job on a remote host over real SSH (tests/remote_host.py), in JupyterLab: where it runs, then
    "cannot reach HOST since T" while sshd is down, readable in both themes, and the log going on after."""
    from conftest import TEST_IMAGE
    from remote_host import RemoteHost, missing

    problem = missing(docker_client)
    if problem:
        if IN_CI:
            pytest.fail(f"the remote host tests must run in CI: {problem}")
        pytest.skip(problem)
    remote = RemoteHost(local=docker_client)
    root = tmp_path / "lab"
    root.mkdir()
    home = root / "trainer-home"
    try:
        remote.start()
        remote.load_image(TEST_IMAGE)
        with _jupyter_server("jupyterlab", "--LabApp.expose_app_in_browser=True", root=root, home=home, env=remote.environ()) as (base, token):
            own = {"base": base, "token": token, "root": root, "home": home}
            _write_notebook(own, "remote.ipynb", "%load_ext jupyter_trainer", REMOTE_CELL.format(url=remote.alias_url, image=TEST_IMAGE))
            page = _open_notebook(browser, own, "remote.ipynb")
            widget = None
            try:
                _run_cell(page, 0)
                _run_cell(page, 1)
                widget = page.locator(".jupyter-trainer-job").first
                # the cell makes the remote container over SSH first: slow on a busy machine
                widget.locator(".jt-status", has_text="running").wait_for(timeout=180_000)
                assert "on jt-remote-test" in widget.locator(".jt-header").first.inner_text()
                widget.locator(".jt-log", has_text="step   3").wait_for(timeout=60_000)
                remote.stop_sshd()
                widget.locator(".jt-reason", has_text="cannot reach jt-remote-test since").wait_for(timeout=60_000)
                assert widget.locator(".jt-status").inner_text() == "running"
                _in_both_themes(page, widget, (".jt-reason", ".jt-header span"), str(ARTIFACTS / "remote-unreachable-{}.png"))
                _set_theme(page, "JupyterLab Light")
                shown = widget.locator(".jt-log").inner_text()
                last = max(int(line.split()[1]) for line in shown.splitlines() if line.startswith("step"))
                remote.start_sshd()
                # back: the reason goes, and the lines printed meanwhile arrive
                widget.locator(".jt-log", has_text=f"step {last + 20:3d}").wait_for(timeout=90_000)
                page.wait_for_function("!document.querySelector('.jupyter-trainer-job .jt-reason')", timeout=60_000)
                widget.screenshot(path=str(ARTIFACTS / "remote-back.png"))
            except Exception as exc:  # say what the view showed, and what the host did
                shown = widget.inner_text(timeout=5_000) if widget is not None and widget.count() else "(no view)"
                raise AssertionError(f"{exc}\n--- the view:\n{shown}\n--- the host's sshd:\n{remote.log('sshd')}") from exc
            finally:
                page.close()
                subprocess.run(
                    [sys.executable, "-m", "jupyter_trainer", "stop", "remote-view"],
                    env={**os.environ, **remote.environ(), "JUPYTER_TRAINER_HOME": str(home)}, capture_output=True, timeout=120,
                )  # fmt: skip
    finally:
        remote.close()


# -- runs side by side ----------------------------------------------------------------------------

COMPARED_CELL = """%%train_detached --host --name {name} --no-widget
import math, time
for step in range(30):
    print(f"step {{step}} loss: {{{scale} * math.exp(-step / {decay}) + 0.1 + 0.08 * math.sin(step):.4f}} acc: {{1 - math.exp(-step / {decay}):.3f}}", flush=True)
    time.sleep(0.1)
"""


def test_compare_two_jobs_live_in_both_themes_and_from_the_jobs_table(lab, browser):
    _write_notebook(
        lab, "compare.ipynb", "%load_ext jupyter_trainer",
        COMPARED_CELL.format(name="cmp-lr-0.1", scale=2.0, decay=5), COMPARED_CELL.format(name="cmp-lr-0.01", scale=2.5, decay=15),
        "%train_compare cmp-lr-0.1 cmp-lr-0.01", "%train_jobs",
    )  # fmt: skip
    page = _open_notebook(browser, lab, "compare.ipynb")
    panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
    news = page.locator(".jp-toast-button", has_text="No")  # the lab's offer of news, over the outputs
    try:
        with contextlib.suppress(Exception):
            news.first.click(timeout=5_000)
        for index in range(4):
            _run_cell(page, index)
        view = page.locator(f"{panel} .jupyter-trainer-compare").first
        view.wait_for()
        # live: the jobs still run when the view opens; it follows them until both have ended
        rows = view.locator(".jt-compare-table tbody tr")
        rows.nth(1).locator(".jt-status", has_text="completed").wait_for(timeout=90_000)
        rows.nth(0).locator(".jt-status", has_text="completed").wait_for(timeout=30_000)
        page.wait_for_function(
            f"[...document.querySelectorAll('{panel} .jupyter-trainer-compare .jt-compare-table tbody tr')]"
            ".every(row => row.cells[5].textContent === '30')", timeout=30_000,
        )  # fmt: skip
        chart = view.locator("svg.jt-chart")
        assert chart.count() == 1 and chart.locator("polyline:visible").count() == 2  # the others: other scale, smoothing
        legend = " ".join(view.locator(".jt-legend").all_text_contents())
        assert "cmp-lr-0.1" in legend and "cmp-lr-0.01" in legend
        assert "step" in chart.locator(".jt-axis-title:visible").text_content()
        colours = chart.locator("polyline").evaluate_all("lines => lines.map(line => getComputedStyle(line).stroke)")
        assert len(set(colours)) == 2, colours  # a colour each
        cells = [rows.nth(index).locator("td").all_inner_texts() for index in range(2)]
        assert [cell[0] for cell in cells] == ["cmp-lr-0.1", "cmp-lr-0.01"] and all(cell[2] == "loss" for cell in cells)
        assert "best (lowest)" in view.locator(".jt-compare-table th").all_inner_texts()
        assert view.locator(".jt-error").count() == 0, view.inner_text()  # nothing went wrong on the way

        def lines_stand_out(name):  # each job's line from the background (3:1, as graphics need)
            for line in range(2):
                stroke = chart.locator("polyline:visible").nth(line).evaluate(
                    "line => getComputedStyle(line).stroke.match(/\\d+/g).slice(0, 3).map(Number)"
                )
                background = view.evaluate(COLOURS_OF)[1]
                assert _contrast(stroke, background) >= 3, f"line {line} in the {name} theme"

        selectors = (".jt-compare-table td", ".jt-compare-table th", ".jt-legend .jt-name", ".jt-chart .jt-axis-title", ".jt-compare-title")
        _in_both_themes(page, view, selectors, str(ARTIFACTS / "compare-{}.png"), also=lines_stand_out)
        _set_theme(page, "JupyterLab Light")

        # the jobs table: tick both jobs' rows, Compare shows their comparison below it
        table = page.locator(f"{panel} .jupyter-trainer-jobs").first
        button = table.locator(".jt-compare")
        _run_cell(page, 4)
        table.locator(".jt-row", has_text="cmp-lr-0.01").first.wait_for()
        for job in ("cmp-lr-0.1", "cmp-lr-0.01"):
            table.locator(".jt-row", has_text=job).first.locator(".jt-pick input").check()
        page.wait_for_function(f"!document.querySelector('{panel} .jupyter-trainer-jobs .jt-compare').disabled")
        assert button.inner_text().strip() == "Compare 2"
        button.click()
        below = table.locator(".jupyter-trainer-compare").first
        below.locator("svg.jt-chart polyline:visible").nth(1).wait_for(timeout=30_000)
        assert below.locator(".jt-compare-table tbody tr").count() == 2
        table.scroll_into_view_if_needed()
        table.screenshot(path=str(ARTIFACTS / "jobs-table-compare.png"))
    finally:
        _set_theme(page, "JupyterLab Light")
        page.close()


# -- a sweep, as one thing -----------------------------------------------------------------------

SWEEP_CELL = """%%train_detached --host --name swept --sweep decay=5,10,20 --max-running 2
import math, sys, time
decay = float(sys.argv[-1])
for step in range(25):
    print(f"step {step} loss: {2 * math.exp(-step / decay) + 0.1:.4f}", flush=True)
    time.sleep(0.1)
"""


def test_a_sweep_is_one_view_and_one_row_in_both_themes(lab, browser):
    _write_notebook(lab, "sweep.ipynb", "%load_ext jupyter_trainer", SWEEP_CELL, "%train_jobs")
    page = _open_notebook(browser, lab, "sweep.ipynb")
    panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
    news = page.locator(".jp-toast-button", has_text="No")
    try:
        with contextlib.suppress(Exception):
            news.first.click(timeout=5_000)
        for index in range(2):
            _run_cell(page, index)
        view = page.locator(f"{panel} .jupyter-trainer-compare").first
        view.wait_for()
        # live: progress, the runs' table with their values, one chart of every run, one Stop
        view.locator(".jt-compare-title", has_text="sweep swept").wait_for()
        view.locator(":text('3 of 3 done')").wait_for(timeout=120_000)
        page.wait_for_function(
            f"[...document.querySelectorAll('{panel} .jupyter-trainer-compare .jt-compare-table tbody tr')]"
            ".every(row => row.cells[6].textContent === '25')", timeout=30_000,
        )  # fmt: skip
        heads = view.locator(".jt-compare-table th").all_inner_texts()
        assert heads[:2] == ["name", "decay"] and "best (lowest)" in heads, heads
        names = [row[0] for row in (view.locator(".jt-compare-table tbody tr").nth(index).locator("td").all_inner_texts() for index in range(3))]
        assert names == ["swept-1 ★ best", "swept-2", "swept-3"], names  # the quickest decay ends lowest
        chart = view.locator("svg.jt-chart")
        assert chart.count() == 1 and chart.locator("polyline:visible").count() == 3
        assert "swept-1 (best)" in " ".join(view.locator(".jt-legend").all_text_contents())
        assert view.locator("button", has_text="Stop sweep").is_disabled()  # nothing left to stop
        _in_both_themes(page, view, (".jt-compare-table td", ".jt-compare-table th", ".jt-legend .jt-name", ".jt-chart .jt-tick", ".jt-compare-title"), str(ARTIFACTS / "sweep-{}.png"))
        _set_theme(page, "JupyterLab Light")
        # the jobs table: the sweep is one row, with its progress
        _run_cell(page, 2)
        table = page.locator(f"{panel} .jupyter-trainer-jobs").first
        row = table.locator(".jt-row", has_text="swept").first
        row.locator(":text('sweep: 3 of 3 done')").wait_for(timeout=30_000)
        assert table.locator(".jt-row", has_text="swept-1").count() == 0
        table.scroll_into_view_if_needed()
        table.screenshot(path=str(ARTIFACTS / "jobs-table-sweep.png"))
    finally:
        _set_theme(page, "JupyterLab Light")
        page.close()


# -- a chart's controls: no script, the state kept across the view's updates -----------------------

LONG_COMPARED_CELL = COMPARED_CELL.replace("range(30)", "range(90)")


def _shown(locator):
    """Whether the element is drawn: Playwright's visibility (a box, no display: none on the way up)."""
    return locator.first.is_visible()


def test_the_comparison_chart_scale_smoothing_and_legend_in_both_themes(lab, browser):
    _write_notebook(
        lab, "controls.ipynb", "%load_ext jupyter_trainer",
        LONG_COMPARED_CELL.format(name="ctl-fast", scale=2.0, decay=5), LONG_COMPARED_CELL.format(name="ctl-slow", scale=2.5, decay=30),
        "%train_compare ctl-fast ctl-slow",
    )  # fmt: skip
    page = _open_notebook(browser, lab, "controls.ipynb")
    panel = f"#{page.evaluate('window.jupyterapp.shell.currentWidget.id')}"
    news = page.locator(".jp-toast-button", has_text="No")
    docs = REPO / "docs"
    try:
        with contextlib.suppress(Exception):
            news.first.click(timeout=5_000)
        for index in range(4):
            _run_cell(page, index)
        view = page.locator(f"{panel} .jupyter-trainer-compare").first
        plot = view.locator(".jt-plot")
        plot.locator(".jt-scale-lin polyline").first.wait_for()
        rows = view.locator(".jt-compare-table tbody tr")
        rows.nth(0).locator(".jt-status", has_text="running").wait_for(timeout=60_000)
        # the default: the scale the chart chose (linear here), raw lines, both runs
        assert plot.locator(".jt-chart-controls").is_visible()
        assert _shown(plot.locator(".jt-scale-lin")) and not _shown(plot.locator(".jt-scale-log"))
        assert not _shown(plot.locator(".jt-scale-lin .jt-sm2"))
        # the choices, made while the jobs run and the view is redrawn twice a second
        plot.locator("label.jt-pick-ylog").click()
        plot.locator("label.jt-pick-s2").click()
        plot.locator("label.jt-entry-1").click()
        before = view.locator(".jt-compare-table").inner_text()
        page.wait_for_function(  # the chart was redrawn since (its table says more values)
            f"document.querySelector('{panel} .jupyter-trainer-compare .jt-compare-table').innerText !== {json.dumps(before)}"
        )
        page.wait_for_timeout(1200)
        log, linear = plot.locator(".jt-scale-log"), plot.locator(".jt-scale-lin")
        assert _shown(log) and not _shown(linear)
        assert "log scale" in log.locator(".jt-axis-title").text_content()
        assert any(tick in ("0.1", "1") for tick in log.locator(".jt-tick").all_text_contents())
        fast = log.locator(".jt-run-0")
        assert _shown(fast.locator(".jt-sm2")) and not _shown(fast.locator(".jt-sm1"))
        assert fast.locator(".jt-raw").evaluate("line => getComputedStyle(line).strokeOpacity") == "0.35"  # faint behind
        assert not _shown(log.locator(".jt-run-1")) and not _shown(log.locator(".jt-run-1 .jt-raw"))
        assert "line-through" in plot.locator(".jt-entry-1").evaluate("key => getComputedStyle(key).textDecorationLine")
        _in_both_themes(page, view, (".jt-entries .jt-name", ".jt-pick-ylog", ".jt-pick-ylin", ".jt-scale-log .jt-tick"), str(docs / "chart-controls-{}.png"), shot=plot)
        _set_theme(page, "JupyterLab Light")
        # back: the run shown again, linear, no smoothing; then the chart's own choice of scale
        plot.locator("label.jt-entry-1").click()
        plot.locator("label.jt-pick-ylin").click()
        plot.locator("label.jt-pick-s0").click()
        assert _shown(plot.locator(".jt-scale-lin .jt-run-1 .jt-raw")) and not _shown(plot.locator(".jt-scale-log"))
        assert not _shown(plot.locator(".jt-scale-lin .jt-sm2"))
        plot.locator("label.jt-pick-yauto").click()
        # (waited for: the view is redrawn twice a second, and a look at the moment it is replaced sees nothing)
        plot.locator("g.jt-scale-lin:not([display]), g.jt-scale-log:not([display])").first.wait_for(state="visible", timeout=5_000)
        plot.locator("g.jt-scale-lin[display], g.jt-scale-log[display]").first.wait_for(state="hidden", timeout=5_000)
    finally:
        _set_theme(page, "JupyterLab Light")
        page.close()
        for job in ("ctl-fast", "ctl-slow"):
            subprocess.run([sys.executable, "-m", "jupyter_trainer", "stop", job], env={**os.environ, "JUPYTER_TRAINER_HOME": str(lab["home"])}, capture_output=True)
