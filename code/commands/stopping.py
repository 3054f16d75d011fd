"""Stopped by a signal: one line on stderr, exit status 128 + the signal, no partial file left.

Every signal whose default is to end the process is caught (Ctrl-C's SIGINT, SIGTERM from
`timeout` or a CI cancel, SIGHUP when the terminal closes, SIGQUIT, SIGUSR1/2, the timers'
SIGALRM, SIGVTALRM, SIGPROF, and SIGXCPU), except one the parent set to be ignored (`nohup`
ignores SIGHUP: it stays ignored). SIGKILL cannot be caught; a partial file it leaves is named
`*.partial` and never mistaken for the real one.

    while a command runs (`armed`)   the signal raises Stopped where the program is, so that it
                                     unwinds like an error: commands/cli.py prints the one line,
                                     and every partial file is removed (output_files.py)
    before it (modules loading)      and after it: nothing can be half-written then, so the
                                     process prints the line and exits at once
    a second signal                  while the first unwinds: ignored, the first one's exit stands

This is the shell's business: the engine knows nothing of signals.
"""

import contextlib
import os
import signal
import sys

_NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
          "SIGPROF", "SIGXCPU")
CAUGHT = tuple(getattr(signal, name) for name in _NAMES if hasattr(signal, name))
_HOW = {"SIGINT": "interrupted (Ctrl-C)", "SIGTERM": "terminated (SIGTERM)",
        "SIGHUP": "hung up (SIGHUP: the terminal closed)"}


class Stopped(BaseException):
    """A signal, raised where the program is. A BaseException, as KeyboardInterrupt is, so
    that no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class _State:
    armed = False                 # a command is running: unwind, do not exit at once
    stopping = False              # a signal came; any later one is ignored


def describe(signum: int) -> str:
    """'interrupted (Ctrl-C)', 'terminated (SIGTERM)', 'stopped by SIGUSR1'."""
    name = signal.Signals(signum).name
    return _HOW.get(name, f"stopped by {name}")


def say_stopped(signum: int) -> None:
    """The one line; a closed terminal (SIGHUP) may refuse even that, which is no error."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"servesim: {describe(signum)}; no partial file is left behind\n")
        sys.stderr.flush()


def _on_signal(signum, frame):
    if _State.stopping:
        return
    _State.stopping = True
    if not _State.armed:  # no command running, so no file to clean up: leave now
        say_stopped(signum)
        os._exit(128 + signum)
    raise Stopped(signum)


def install() -> dict:
    """Catch every signal of CAUGHT not ignored by the parent; returns what was there before."""
    previous = {}
    for signum in CAUGHT:
        handler = signal.getsignal(signum)
        if handler in (signal.SIG_IGN, None) or handler is _on_signal:
            continue
        previous[signum] = signal.signal(signum, _on_signal)
    return previous


def restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def armed():
    """A command runs: a signal now raises Stopped, to be caught by the command line."""
    _State.armed, _State.stopping = True, False
    try:
        yield
    finally:
        _State.armed = False


@contextlib.contextmanager
def held():
    """Every caught signal waits until the block is done (where the platform can hold them):
    around creating, renaming and removing partial files, so none is lost track of."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, CAUGHT)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
