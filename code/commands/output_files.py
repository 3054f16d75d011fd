"""Files a command writes (`--svg`, `--save-detailed`, `--step-log`): whole, or not at all.

A learner who mistypes a flag, or a run that fails half-way, must not leave a half-written chart
behind that looks real. So a command checks every output path before it simulates anything, and
writes the files only after every input was validated and every simulation succeeded: each into a
temporary file beside its target, then renamed over it (`os.replace`, atomic on one file system).

    with PendingFiles(outputs) as files:       # every path checked now, the step log opened
        ... simulate and render; files.add_text(path, text) ...
    # left normally: every file written whole; left by an exception: none, and no trace
"""

import os
import tempfile
from typing import Optional

from commands.step_log import StepLog
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


class PartialFile:
    """A file being written under a temporary name beside its target, until `commit()`."""

    def __init__(self, path: str):
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        descriptor, self._partial_path = tempfile.mkstemp(dir=directory, suffix=".partial")
        self.file = os.fdopen(descriptor, "w", encoding="utf-8", newline="\n")

    def commit(self) -> None:
        """Rename the finished file over its target, with the permissions open() would give."""
        self.file.close()
        os.chmod(self._partial_path, 0o666 & ~_umask())  # mkstemp made it 0600
        os.replace(self._partial_path, self.path)

    def discard(self) -> None:
        self.file.close()
        if os.path.exists(self._partial_path):
            os.unlink(self._partial_path)


class PendingFiles:
    """The files of one command, held back until the `with` block ends without an error.

    `step_log` streams into its partial file while the engine runs, because it can be long; the
    other files are whole texts, written at the end.
    """

    def __init__(self, outputs):
        """`outputs` (flags.Outputs) names the paths; each is checked here, before anything runs."""
        for flag, path in outputs.file_paths():
            check_writable(flag, path)
        self._step_log_path: Optional[str] = outputs.step_log
        self._step_log_file: Optional[PartialFile] = None
        self.step_log: Optional[StepLog] = None
        self._texts: list[tuple[str, str]] = []  # (path, content)

    def __enter__(self) -> "PendingFiles":
        if self._step_log_path:
            self._step_log_file = PartialFile(self._step_log_path)
            self.step_log = StepLog(self._step_log_file.file)
        return self

    def add_text(self, path: str, text: str) -> None:
        self._texts.append((path, text))

    def __exit__(self, error_type, error, traceback) -> bool:
        if error_type is None:
            self._commit()
        elif self._step_log_file:
            self._step_log_file.discard()
        return False  # an error goes on up to the command line, which reports it

    def _commit(self) -> None:
        if self._step_log_file:
            self._step_log_file.commit()
        for path, text in self._texts:
            write_atomically(path, text)


def write_atomically(path: str, text: str) -> None:
    partial = PartialFile(path)
    try:
        partial.file.write(text)
        partial.commit()
    except BaseException:
        partial.discard()
        raise


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask
