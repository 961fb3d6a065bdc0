"""Fixtures of the rgaps pytest suite: one private rgapsd per test session.

The daemon comes from the build tree ($RGAPS_BUILD), listens on a socket in
a temporary directory, uses its own shared-memory instance name, and is
stopped with SIGTERM at the end (SIGKILL if it ignores that); its segments
are removed even when a test fails. Every topic a test needs is created at
run time from the daemon's "defaults" (small host-memory pools), except those
that need other settings, which have files in topics.d.
"""
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

BUILD = os.environ.get("RGAPS_BUILD")

# Topics with settings of their own (name -> topic file); the rest use the defaults.
TOPICS = {
    "drop": {"overflow": "drop_oldest", "queue_depth": 8},
    "block": {"overflow": "block", "queue_depth": 4, "block_timeout_ms": 100},
    "holds": {"max_holds": 4},
    "loans": {"max_loans": 2},
    "small": {"pool_size": "64KiB", "max_message_size": "16KiB"},
    # four entries and a long wait for room: publishes that block until something happens
    "closing": {"overflow": "block", "queue_depth": 4, "block_timeout_ms": 30000},
}
DEFAULTS = {"memory": "host", "pool_size": "16MiB", "max_message_size": "4MiB", "queue_depth": 64}


def _rgapsd():
    if not BUILD:
        pytest.skip("RGAPS_BUILD is not set: run through `meson test --suite python`")
    path = os.path.join(BUILD, "src", "daemon", "rgapsd")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built")
    return path


class Daemon:
    def __init__(self, tmp):
        self.dir = tmp
        self.socket = os.path.join(tmp, "rgapsd.sock")
        self.instance = f"py{os.getpid()}"
        self.log = os.path.join(tmp, "rgapsd.log")
        self.proc = None

    def start(self):
        os.makedirs(os.path.join(self.dir, "topics.d"), exist_ok=True)
        for name, keys in TOPICS.items():
            with open(os.path.join(self.dir, "topics.d", name + ".json"), "w") as f:
                json.dump(keys, f)
        cfg = os.path.join(self.dir, "rgapsd.json")
        with open(cfg, "w") as f:
            json.dump({"topics_dir": "topics.d", "defaults": DEFAULTS}, f)
        env = dict(os.environ, RGAPS_PLUGIN_DIR=os.path.join(BUILD, "plugins"))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [_rgapsd(), "--socket", self.socket, "--instance", self.instance,
                 "--log-level", "info", "-c", cfg],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        import rgaps

        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rgapsd exited at start: {self.tail()}")
            if os.path.exists(self.socket):
                try:
                    rgaps.topics()
                    return
                except rgaps.Error:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"rgapsd did not answer in 10 s: {self.tail()}")
            time.sleep(0.05)

    def tail(self, n=20):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise RuntimeError("rgapsd ignored SIGTERM for 10 s")
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"rgaps-{self.instance}-"):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass
        return self.proc.returncode if self.proc else 0


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    d = Daemon(str(tmp_path_factory.mktemp("rgapsd")))
    os.environ["RGAPS_SOCKET"] = d.socket
    os.environ["RGAPS_PLUGIN_DIR"] = os.path.join(BUILD or "", "plugins")
    try:
        d.start()
        yield d
    finally:
        rc = d.stop()
        if rc not in (0, None):
            print(f"rgapsd exited {rc}: {d.tail()}", file=sys.stderr)


_names = itertools.count()


@pytest.fixture
def topic(daemon, request):
    """A fresh topic name (created with the defaults when first attached)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"t{next(_names)}-{request.node.name}")[:63]


def pool_used(name):
    import rgaps

    for t in rgaps.topics():
        if t["name"] == name:
            return t["pool_used"]
    return None


def close_ends(handle, call):
    """Run call() in a thread, close handle from this one, and return what call raised
    (None if nothing): the call must end within 10 s of the close."""
    import threading

    errors, started = [], threading.Event()

    def run():
        started.set()
        try:
            call()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    started.wait(5)
    time.sleep(0.1)  # into its wait (if not, close() comes first: the same end)
    handle.close()
    t.join(10)
    assert not t.is_alive(), "close() from another thread did not end the call"
    return errors[0] if errors else None


def wait_until(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def run_py(code, timeout=60, **kw):
    """Run Python `code` in a child process with the package on its path."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ), **kw)
