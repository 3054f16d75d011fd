"""Files a command writes (`--svg`, `--save-detailed`, `--step-log`): whole, or not at all.

A learner who mistypes a flag, or a run that fails half-way, must not leave a half-written chart
behind that looks real. So a command checks every output path before it simulates anything, and
writes the files only after every input was validated and every simulation succeeded: each into a
temporary file beside its target, then renamed over it (`os.replace`, atomic on one file system).
"""

import os
import tempfile

from config import ConfigError


def check_writable(flag: str, path: str) -> None:
    """Fail now, in one line, if `path` could not be written later."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: is a directory; give a file path")
    if not os.path.isdir(directory):
        raise ConfigError(f"{flag} {path}: directory {directory} does not exist; create it or "
                          "give a path in an existing directory")
    if not os.access(directory, os.W_OK):
        raise ConfigError(f"{flag} {path}: directory {directory} is not writable; give a path "
                          "in a directory you can write to")


class PendingFiles:
    """The files of one command, held back until `commit()`; `discard()` leaves no trace.

    `step_log` (step_log.StepLog) streams into a temporary file while the engine runs, because
    it can be long; the other files are whole texts, written at the end.
    """

    def __init__(self):
        self.step_log = None
        self._texts: list[tuple[str, str]] = []  # (path, content)

    def add_text(self, path: str, text: str) -> None:
        self._texts.append((path, text))

    def commit(self) -> None:
        if self.step_log:
            self.step_log.commit()
        for path, text in self._texts:
            write_atomically(path, text)

    def discard(self) -> None:
        if self.step_log:
            self.step_log.discard()


def write_atomically(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, partial_path = tempfile.mkstemp(dir=directory, suffix=".partial")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        publish(partial_path, path)
    except BaseException:
        if os.path.exists(partial_path):
            os.unlink(partial_path)
        raise


def publish(partial_path: str, path: str) -> None:
    """Rename a finished temporary file over its target, with the permissions open() gives."""
    os.chmod(partial_path, 0o666 & ~_umask())  # mkstemp made it 0600
    os.replace(partial_path, path)


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask
