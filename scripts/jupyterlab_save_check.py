"""Open every notebook in a real JupyterLab (headless Chromium), save it without edits, and
report what the save changed: nothing, when the committed metadata is what JupyterLab writes.

    python scripts/jupyterlab_save_check.py            # the committed HEAD, cloned to a temp dir
    python scripts/jupyterlab_save_check.py --keep     # keep the clone to inspect its git diff

Needs `jupyterlab` and `websocket-client` in this Python and the Debian package `chromium`.
JupyterLab runs on the clone with its app object exposed; Chromium is driven through its DevTools
protocol: each notebook is opened, waited on until its kernel is ready, and saved through the
document's context (what ``docmanager:save`` calls). Exit status 1 when `git status` of the clone
is not clean, 2 when the check itself failed (a notebook not open within the time limit, a server
not answering, a browser error; the server log's tail is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

REPO = Path(__file__).resolve().parents[1]
LAB_PORT, DEVTOOLS_PORT, TOKEN = 8899, 9333, "gsd-save-check"
OPEN_SECONDS = 120  # per notebook: the page, the document and its kernel ready
START_SECONDS = 60  # JupyterLab's and Chromium's servers answering


def _wait_for(url: str, seconds: float) -> bytes:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return urllib.request.urlopen(url, timeout=2).read()
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {seconds} s") from None
            time.sleep(0.5)


class Page:
    """One Chromium tab over the DevTools protocol: ``evaluate`` runs JavaScript, awaits it."""

    def __init__(self) -> None:
        targets = json.loads(_wait_for(f"http://localhost:{DEVTOOLS_PORT}/json", START_SECONDS))
        pages = [t for t in targets if t["type"] == "page"]
        if not pages:
            raise RuntimeError("Chromium lists no page to drive")
        url = pages[0]["webSocketDebuggerUrl"]
        self.socket, self.calls = websocket.create_connection(url, timeout=60), 0

    def call(self, method: str, **params) -> dict:
        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while (message := json.loads(self.socket.recv())).get("id") != self.calls:
            pass
        return message

    def evaluate(self, expression: str):
        reply = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "error" in reply:
            raise RuntimeError(f"DevTools: {reply['error']}")
        if "exceptionDetails" in reply.get("result", {}):
            raise RuntimeError(reply["result"]["exceptionDetails"]["exception"]["description"])
        return reply["result"]["result"].get("value")


def _widget(path: str) -> str:
    """JavaScript for the open document widget of ``path`` (undefined until it exists)."""
    return (f"Array.from((window.jupyterapp ? window.jupyterapp.shell.widgets('main') : []))"
            f".find(w => w.context && w.context.path === {json.dumps(path)})")


def open_and_save(page: Page, path: str) -> bool:
    """Open ``path`` in JupyterLab, wait until document and kernel are ready, save it; return
    whether JupyterLab's model was already dirty (modified) before the save."""
    page.call("Page.navigate", url=f"http://localhost:{LAB_PORT}/lab/tree/{path}?token={TOKEN}")
    ready = f"(() => {{ const w = {_widget(path)}; return !!(w && w.context.isReady && w.sessionContext.isReady); }})()"
    deadline = time.monotonic() + OPEN_SECONDS
    while not page.evaluate(ready):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not open with a ready kernel within {OPEN_SECONDS} s")
        time.sleep(1)
    time.sleep(2)  # let the widgets' and the kernel's late metadata arrive before the save
    return page.evaluate(f"(async () => {{ const w = {_widget(path)}; const dirty = w.context.model.dirty; "
                         f"await w.context.save(); return dirty; }})()")


def check(clone: Path, notebooks: list[str]) -> str:
    """Open and save each notebook in ``clone``; the clone's ``git status --porcelain`` afterwards."""
    env = dict(os.environ, PYTHONPATH=str(clone))
    log = open(clone / ".jupyterlab-save-check.log", "w")
    processes: list[subprocess.Popen] = []
    try:
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={LAB_PORT}",
             f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={clone}",
             "--LabApp.expose_app_in_browser=True", "--ServerApp.port_retries=0"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        processes.append(subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", f"--remote-debugging-port={DEVTOOLS_PORT}",
             "--remote-allow-origins=*", "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        _wait_for(f"http://localhost:{LAB_PORT}/api/status?token={TOKEN}", START_SECONDS)
        page = Page()
        for path in notebooks:
            dirty = open_and_save(page, path)
            print(f"{path}: opened, kernel ready, saved; modified on opening: {'yes' if dirty else 'no'}")
    finally:
        for process in reversed(processes):  # SIGTERM first: the server shuts its kernels down
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        log.close()
    return subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True,
                          text=True, check=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone and print its path")
    args = parser.parse_args()
    clone = Path(tempfile.mkdtemp(prefix="gsd-save-check-")) / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    (clone / ".git" / "info" / "exclude").write_text(".jupyterlab-save-check.log\n")
    notebooks = sorted(p.relative_to(clone).as_posix() for p in (clone / "notebooks").glob("*.ipynb"))
    try:
        diff = check(clone, notebooks)
    except Exception as error:  # the check failed, not the notebooks: say why, with the log
        print(f"the check failed: {type(error).__name__}: {error}")
        log = clone / ".jupyterlab-save-check.log"
        if log.exists():
            print("JupyterLab's log ends:\n" + log.read_text(errors="replace")[-2000:])
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(clone.parent, ignore_errors=True)
    print(f"git status after saving {len(notebooks)} notebooks: " + (diff.strip() or "clean"))
    if args.keep:
        print(f"clone kept at {clone}")
    return 1 if diff.strip() else 0


if __name__ == "__main__":
    sys.exit(main())
