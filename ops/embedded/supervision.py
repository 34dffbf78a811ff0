"""Process supervision: child processes, their restart policy, and the signals that stop them.

Nothing here knows what a child is (broker, Postgres, the app): the stack
(ops/embedded/stack.py) decides what to start, in which order, and what to
wait for after a restart.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pwd
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from services.core.errors import StackError

log = logging.getLogger("memstream.stack")
_PR_SET_PDEATHSIG = 1
# A crash after this long up starts the backoff over; the backoff never grows past the cap.
_HEALTHY_SECONDS = 60.0
_MAX_BACKOFF = 30.0


def _die_with_parent() -> None:
    """Children get SIGTERM if the supervisor itself is killed."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def host_port(address: str) -> tuple[str, int]:
    """`host:port` (host may be empty: loopback) as a pair."""
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def wait_until(probe: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll `probe` until it answers True; a probe that raises counts as not ready yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except Exception as exc:
            log.debug("%s not ready: %s", what, exc)
        time.sleep(interval)
    raise StackError(f"{what} did not become ready within {timeout:.0f}s")


def tcp_open(host: str, port: int) -> bool:
    """True when something accepts connections there (raises OSError when not: a probe for wait_until)."""
    with socket.create_connection((host, port), timeout=1):
        return True


def port_busy(host: str, port: int) -> bool:
    try:
        return tcp_open(host, port)
    except OSError:
        return False


def free_port() -> int:
    """A loopback port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_user(user: str | None) -> dict[str, Any]:
    """subprocess arguments to run as `user`: uid, gid and no supplementary groups (root's would shadow "other")."""
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


class Child:
    """One supervised process: its own session (so its whole group can be killed), output in log_dir/NAME.log."""

    def __init__(
        self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None, user: str | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.user = user
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            **as_user(self.user),
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        log.info("started %s (pid %s), log %s", self.name, self.proc.pid, self.log_path)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs; killing", self.name, timeout)
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._log is not None:
            self._log.close()

    def restart(self) -> None:
        """Start a dead child again, after killing what it left in its process group (a postmaster's backends)."""
        log.error(
            "%s exited with %s; restarting it (see %s)", self.name, self.proc and self.proc.returncode, self.log_path
        )
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.stop()
        self.start()


@dataclass
class _Backoff:
    started: float = 0.0
    delay: float = 1.0
    due: float | None = None


class RestartPolicy:
    """Our own processes (the app, workers): a dead one starts again after its backoff, each on its own clock.

    The backoff doubles up to 30 s, and starts over at 1 s for a process
    that crashed after a healthy minute. Waiting never holds up the checks
    of the others: `restart_when_due` is called on every supervision round.
    Each start writes run_dir/NAME.pid.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._backoff: dict[str, _Backoff] = {}

    def start(self, child: Child) -> None:
        self._backoff.setdefault(child.name, _Backoff()).started = time.monotonic()
        child.start()
        (self.run_dir / f"{child.name}.pid").write_text(str(child.proc.pid if child.proc else ""))

    def restart_when_due(self, child: Child, start: Callable[[], None]) -> None:
        """Call `start` (which builds a fresh child and passes it to `self.start`) once a dead child's wait is over."""
        if child.alive():
            return
        state = self._backoff.setdefault(child.name, _Backoff())
        now = time.monotonic()
        if state.due is None:
            if now - state.started > _HEALTHY_SECONDS:
                state.delay = 1.0
            code = child.proc.returncode if child.proc else None
            log.warning("%s exited with %s; restarting in %.0fs", child.name, code, state.delay)
            state.due, state.delay = now + state.delay, min(state.delay * 2, _MAX_BACKOFF)
        elif now >= state.due:
            state.due = None
            child.stop()  # reaped already: closes its log
            start()


def stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call `stop`: the stack stops its children before the supervisor exits."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop())
