"""Files a command writes (`--svg`, `--save-detailed`, `--step-log`): whole, or not at all.

A learner who mistypes a flag, or a run that fails half-way, must not leave a half-written chart
behind that looks real. So a command checks every output path before it simulates anything, and
writes the files only after every input was validated and every simulation succeeded: each into a
temporary file beside its target, then renamed over it (`os.replace`, atomic on one file system).

    outputs = flags.outputs_from_args(args)    # every path checked (check_paths), first
    with PendingFiles(outputs) as files:       # the step log opened
        ... simulate and render; files.add_text(path, text) ...
    # left normally: every file written whole; left by an exception: none, and no trace

Left by Ctrl-C or SIGTERM too (commands/cli.py turns SIGTERM into an exception that unwinds like
Ctrl-C): the partial file is removed on the way out. Signals wait while a partial file is created
or the files are renamed into place, so no moment exists in which one could be lost track of.

A path is refused up front when it is empty, ends in a slash, names a directory or anything but a
regular file, sits in a directory that does not exist or cannot be written, or is the same file as
another output or as an input (`--trace`; a new command's input flag joins flags.INPUT_FLAGS). A
write that fails later (a full disk) is one line, `OutputError`, and exit status 1.
"""

import contextlib
import os
import signal
import tempfile
from typing import Optional

from commands.step_log import StepLog
from config import ConfigError


class OutputError(Exception):
    """A file could not be written after the run (a full disk): one line, exit status 1."""


def check_paths(outputs) -> None:
    """Every output path of `outputs` (flags.Outputs), now, before anything runs."""
    for flag, path in outputs.file_paths():
        check_writable(flag, path)
    check_distinct(outputs.file_paths(), outputs.input_paths)


def check_writable(flag: str, path: str) -> None:
    """Fail now, in one line, if `path` could not be written later."""
    if not path:
        raise ConfigError(f"{flag} {path!r}: an empty path; give a file name")
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise ConfigError(f"{flag} {path}: ends with {path[-1]!r}, so it names a directory; give "
                          "a file path")
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: is a directory; give a file path")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ConfigError(f"{flag} {path}: is not a regular file (a device or a pipe); servesim "
                          "writes a file beside it and renames it into place, so give a file path")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"{flag} {path}: directory {directory} does not exist; create it or "
                          "give a path in an existing directory")
    if not os.access(directory, os.W_OK):
        raise ConfigError(f"{flag} {path}: directory {directory} is not writable; give a path "
                          "in a directory you can write to")


def check_distinct(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
    """No output may be another output, or a file the run reads (it would overwrite it)."""
    seen = list(inputs)
    for flag, path in outputs:
        for other_flag, other_path in seen:
            if _same_file(path, other_path):
                raise ConfigError(f"{flag} {path} is the same file as {other_flag} {other_path}; "
                                  f"give {flag} a path of its own")
        seen.append((flag, path))


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)  # a hard link


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait until the block is done (where the platform can hold them)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class PartialFile:
    """A file being written under a temporary name beside its target, until `commit()`."""

    def __init__(self, flag: str, path: str):
        self.flag = flag
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        with self._reported(), _signals_held():
            descriptor, self._partial_path = tempfile.mkstemp(dir=directory, suffix=".partial")
            self.file = os.fdopen(descriptor, "w", encoding="utf-8", newline="\n")

    def write(self, text: str) -> None:
        with self._reported():
            self.file.write(text)

    def commit(self) -> None:
        """Rename the finished file over its target, with the permissions open() would give."""
        with self._reported():
            self.file.close()
            os.chmod(self._partial_path, 0o666 & ~_umask())  # mkstemp made it 0600
            os.replace(self._partial_path, self.path)

    def discard(self) -> None:
        with contextlib.suppress(OSError):  # closing flushes, which fails again on a full disk
            self.file.close()
        if os.path.exists(self._partial_path):
            os.unlink(self._partial_path)

    @contextlib.contextmanager
    def _reported(self):
        try:
            yield
        except OSError as error:
            raise OutputError(f"{self.flag} {self.path}: cannot write "
                              f"({error.strerror or error})") from None


class PendingFiles:
    """The files of one command, held back until the `with` block ends without an error.

    `step_log` streams into its partial file while the engine runs, because it can be long; the
    other files are whole texts, written at the end.
    """

    def __init__(self, outputs):
        """`outputs` (flags.Outputs) names the paths, which `check_paths` has checked."""
        self._flags = {path: flag for flag, path in outputs.file_paths()}
        self._step_log_path: Optional[str] = outputs.step_log
        self._step_log_file: Optional[PartialFile] = None
        self.step_log: Optional[StepLog] = None
        self._texts: list[tuple[str, str]] = []  # (path, content)

    def __enter__(self) -> "PendingFiles":
        if self._step_log_path:
            self._step_log_file = PartialFile("--step-log", self._step_log_path)
            self.step_log = StepLog(self._step_log_file)
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
        partials = [PartialFile(self._flags.get(path, "output"), path)
                    for path, _ in self._texts]
        try:
            for partial, (_, text) in zip(partials, self._texts):
                partial.write(text)
            with _signals_held():  # every text is written before any file is renamed into
                for partial in partials:  # place, so a full disk leaves every target as it was
                    partial.commit()
                if self._step_log_file:
                    self._step_log_file.commit()
        except BaseException:
            for partial in partials:
                partial.discard()
            if self._step_log_file:
                self._step_log_file.discard()
            raise


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask
