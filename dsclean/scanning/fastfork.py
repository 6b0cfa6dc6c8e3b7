"""The workers' forkserver made fast with multiprocessing's private internals, on the Pythons they were checked on.

Three things the local ``processes`` pool (:mod:`dsclean.scanning.executors`) does that
multiprocessing has no public API for:

- :class:`WorkerContext`: a forkserver context whose processes never re-run the caller's
  ``__main__`` (a user's script without an ``if __name__ == "__main__"`` guard would scan again
  in every worker), and which replaces a forkserver found dead when it asks it for a worker
  (:class:`WorkersUnavailable` if the new one dies too); its launch is the body of
  ``popen_forkserver.Popen._launch``;
- :func:`fork_helpers`: the resource tracker and the forkserver started as forks of this process
  (~2 ms each) instead of fresh interpreters (~0.1 CPU-s each), by filling in the private attributes
  ``forkserver.ensure_running`` and ``resource_tracker.ensure_running`` would;
- :func:`stop_server`: the forkserver stopped, and waited for, at exit.

:data:`SUPPORTED` is the version guard: what is copied or filled in here is the same in the sources
of CPython 3.10, 3.11, 3.12 and 3.13 (``Popen._launch``'s body, the ``main`` signatures of the
forkserver and the resource tracker, the attributes set here), the versions this was written for
and checked on; 3.14 adds an authentication key to the forkserver. On any other version (or with
``SUPPORTED`` set false, as tests/scanning/test_fastfork.py does) the executors take the public path:
multiprocessing's own forkserver context and ``forkserver.ensure_running``. The verdicts are the
same; what that path lacks is what this module adds: the helpers start as fresh interpreters, each
worker re-runs the caller's ``__main__`` (as multiprocessing documents: a script then needs the
guard), a forkserver that dies mid-request fails the pool instead of being replaced, and the
forkserver ends on its own once this process does.
"""

from __future__ import annotations

import contextlib
import io
import logging
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
from multiprocessing import (
    context as mp_context,
)
from multiprocessing import (
    forkserver,
    popen_forkserver,
    reduction,
    resource_tracker,
    spawn,
    util,
)
from multiprocessing.context import set_spawning_popen
from typing import Callable

log = logging.getLogger("dsclean.scanning.executors")  # the pool's logger: these are its workers' start-ups

#: the private internals used here are those of CPython 3.10-3.13 (see the module's docstring); False: the
#: public multiprocessing path everywhere (read at each use, so a test may set it before a scan starts workers)
SUPPORTED = (3, 10) <= sys.version_info[:2] <= (3, 13) and all(
    hasattr(obj, name)
    for obj, names in (
        (forkserver._forkserver, ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_lock", "_stop")),
        (resource_tracker._resource_tracker, ("_fd", "_pid")),
        (popen_forkserver.Popen, ("_launch",)),
    )
    for name in names
)


def server_running() -> bool:
    """This process started a forkserver that has not been stopped (or found dead) since."""
    return forkserver._forkserver._forkserver_pid is not None


def stop_server() -> None:
    """Stop the forkserver this process started and wait for it (its ``_stop``: close its pipe, ``waitpid``)."""
    if server_running():
        forkserver._forkserver._stop()


class _WorkerPopen(popen_forkserver.Popen):
    """Start a process from the forkserver *without* running this process's ``__main__`` in it.

    multiprocessing re-runs the main script in each child (so that functions defined there
    can be unpickled); dsclean's tasks all live in importable modules, and a user's script
    without an ``if __name__ == "__main__"`` guard would scan again inside every worker
    (loky skips the main module the same way). The body is ``popen_forkserver.Popen._launch``
    with the main-module entries left out of the preparation data.
    """

    def _launch(self, process_obj):
        prep = {k: v for k, v in spawn.get_preparation_data(process_obj._name).items() if not k.startswith("init_main")}
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        for attempt in range(_LAUNCH_ATTEMPTS):
            try:
                self._ask_server(buf)
                return
            except (EOFError, OSError) as exc:
                # The forkserver died (an OOM killer's kill -9) between multiprocessing's liveness check and
                # our request; or the resource tracker did. ensure_running, on the next attempt, reaps the
                # dead server and starts a new one (and a new tracker): the scan goes on.
                log.warning(
                    "starting a worker process failed (%s: %s): the forkserver or the resource tracker "
                    "died; starting a new one",
                    type(exc).__name__,
                    exc,
                )
                _forget_dead_server()
                if attempt == _LAUNCH_ATTEMPTS - 1:
                    raise WorkersUnavailable(
                        f"no worker process could be started: the forkserver died again after a restart "
                        f"({type(exc).__name__}: {exc}); is something killing dsclean's processes (memory?)"
                    ) from exc

    def _ask_server(self, buf: io.BytesIO) -> None:
        """One request to the forkserver: popen_forkserver.Popen._launch's body."""
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)  # as in the original: the child watches it to notice its parent's death
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        try:
            with open(w, "wb", closefd=True) as f:
                f.write(buf.getbuffer())
            self.pid = forkserver.read_signed(self.sentinel)
        except BaseException:
            self.finalizer()  # this attempt's pipe ends: closed now, not when the Popen object goes
            raise


#: tries to start one worker (each after a dead forkserver is replaced) before the scan stops cleanly
_LAUNCH_ATTEMPTS = 2


class WorkersUnavailable(RuntimeError):
    """No worker process could be started, even from a new forkserver: the scan stops, keeping its results."""


def _forget_dead_server() -> None:
    """Reap a forkserver that died, so that ``ensure_running`` starts a new one (its state reset as it does)."""
    server = forkserver._forkserver
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return
        done = _reap(pid, _DYING_WAIT)
        if not done:
            return  # alive: the tracker died; ensure_running replaces that one
        if server._forkserver_alive_fd is not None:
            with contextlib.suppress(OSError):  # closed already by multiprocessing: nothing left to release
                os.close(server._forkserver_alive_fd)
        address = server._forkserver_address
        if address and not util.is_abstract_socket_namespace(address):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None


#: seconds a server that failed a request may take to become reapable (see :func:`_reap`)
_DYING_WAIT = 2.0


def _reap(pid: int, wait: float) -> int:
    """``waitpid(pid, WNOHANG)``, retried for up to ``wait`` seconds until it reaps ``pid`` (then ``pid``; else 0).

    A killed forkserver closes its socket and pipes (the EOF or the refused connection the scan just met) a
    moment before the kernel lets its parent reap it: one look at once would call it alive, keep its address,
    and the next request would fail again on the same dead server (issue 29: 2 of 3 runs of
    tests/scanning/test_forkserver_death.py, once the server's fork grew larger and its exit slower). A server
    still alive after ``wait`` (the resource tracker was what died) is left running.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return pid  # not ours to reap, or reaped already: gone
        if done or time.monotonic() >= deadline:
            return done
        time.sleep(0.002)


class _WorkerProcess(mp_context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _WorkerPopen(process_obj)


class WorkerContext(mp_context.ForkServerContext):
    """The forkserver context of the workers: :class:`_WorkerPopen` starts its processes."""

    Process = _WorkerProcess


def fork_helpers(preload: list[str], role_env: str, in_child: Callable[[], object]) -> None:
    """Start multiprocessing's resource tracker and the workers' forkserver as forks of this process.

    What ``forkserver.ensure_running`` does (and ``resource_tracker.ensure_running`` before it), with
    ``os.fork`` where multiprocessing starts a fresh interpreter: each fresh one costs a Python
    start-up and its imports again (~0.1 CPU-s each, on the same two cores as the scan's own start;
    docs/benchmarks-history.md "The scan pipeline"), a fork ~2 ms, and the server inherits what this process has imported.
    Only for a small, single-threaded process (the ``dsclean`` command before it imports the scan):
    the server must be the clean single-threaded process each worker forks from. Both run
    multiprocessing's own ``main`` functions, then end with ``os._exit`` (no teardown, no atexit
    handler of this process, nothing buffered written twice). ``role_env``: the variable each fork
    finds its role in while it is made (:func:`_fork_as`); ``in_child``: run first in each (the
    caller's state the fork copied in the middle of a change, such as a lock it holds).
    """
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    tracker = resource_tracker._resource_tracker
    r, w = os.pipe()
    # as multiprocessing does: SIGINT/SIGTERM blocked until the tracker ignores them (it must outlive a Ctrl-C)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        pid = _fork_as(role_env, "tracker")
        if pid == 0:
            _run_forked(resource_tracker.main, r, close=(w,), in_child=in_child)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    os.close(r)
    tracker._fd, tracker._pid = w, pid

    server = forkserver._forkserver
    address = multiprocessing.connection.arbitrary_address("AF_UNIX")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(address)
        if not util.is_abstract_socket_namespace(address):
            os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()  # the server ends when this process closes alive_w (stop_local_workers)
        pid = _fork_as(role_env, "1")
        if pid == 0:
            _run_forked(forkserver.main, listener.fileno(), alive_r, preload, close=(alive_w, w), in_child=in_child)
        os.close(alive_r)
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid


def _fork_as(env: str, role: str) -> int:
    """``os.fork()``, the child's role in ``env`` while the fork runs (for at-fork hooks such as
    ``scripts/scan_timeline.py``'s; the child drops it at once, so its own children never see it)."""
    os.environ[env] = role
    try:
        return os.fork()
    finally:
        os.environ.pop(env, None)


def _run_forked(main: Callable, *args, close: tuple[int, ...], in_child: Callable[[], object]) -> None:
    """In a child of :func:`fork_helpers`: close this process's ends of its pipes, run ``main``, ``os._exit``."""
    code = 0
    try:
        in_child()
        for fd in close:
            os.close(fd)
        main(*args)
    except SystemExit:  # the forkserver's way of ending when the scan's process is gone
        pass
    except BaseException:
        code = 1
        sys.excepthook(*sys.exc_info())
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)
