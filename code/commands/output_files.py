"""Files a command writes (`--svg`, `--save-detailed`, `--step-log`): whole, or not at all.

A learner who mistypes a flag, or a run that fails half-way, must not leave a half-written chart
behind that looks real. So a command checks every output path before it simulates anything, and
writes the files only after every input was validated and every simulation succeeded: each into a
temporary file beside its target, then renamed over it (`os.replace`, atomic on one file system).

    outputs = flags.outputs_from_args(args)    # every path checked (check_paths), first
    with PendingFiles(outputs) as files:       # the step log opened
        ... simulate and render; files.add_text(path, text) ...
    # left normally: every file written whole; left by an exception: none, and no trace

Left by a signal too (commands/stopping.py turns one into an exception that unwinds like an
error): every partial file still open is removed on the way out (`remove_leftovers`, which
commands/cli.py calls whatever happened). Signals wait while a partial file is created, renamed
or removed, so no moment exists in which one could be lost track of.

A path is refused up front, in one line (exit status 2), when it is empty, ends in a slash, is
too long for the file system, names a directory or anything but a regular file (a device, a
pipe), is a symbolic link that leads nowhere (dangling, or a loop), sits in a directory that
does not exist or where no file can be created (not writable; /proc, /sys), or is the same file
as another output or as an input (`--trace`; a new command's input flag joins
flags.INPUT_FLAGS). A symbolic link to a regular file is followed: the file it points to is
replaced, the link stays. A write that fails later (a full disk) is one line, `OutputError`,
and exit status 1.
"""

import contextlib
import errno
import os
import stat
import tempfile
from typing import Optional

from commands import stopping
from commands.step_log import StepLog
from commands.user_input import file_kind
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
    target = _existing_target(flag, path)
    if target is not None and stat.S_ISDIR(target.st_mode):
        raise ConfigError(f"{flag} {path}: is a directory; give a file path")
    if target is not None and not stat.S_ISREG(target.st_mode):
        raise ConfigError(f"{flag} {path}: is {file_kind(target.st_mode)}, not a regular file; "
                          "servesim writes a file beside it and renames it into place, so give "
                          "a file path")
    directory = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"{flag} {path}: directory {directory} does not exist; create it or "
                          "give a path in an existing directory")
    _check_can_create(flag, path, directory)


def _existing_target(flag: str, path: str):
    """os.stat of what `path` names, following links; None if nothing is there yet."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ConfigError(f"{flag} {path}: a symbolic link to {os.readlink(path)}, which "
                              "does not exist; give a file path, or a link to a file") from None
        return None
    except ValueError:  # a NUL character, which no path may hold
        raise ConfigError(f"{flag} {path}: holds a NUL character, which no file name may; give "
                          "a file path") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ConfigError(f"{flag} {path}: a loop of symbolic links; give a file "
                              "path") from None
        raise ConfigError(f"{flag} {path}: {error.strerror or error}; give a file path "
                          "that can be written") from None


def _check_can_create(flag: str, path: str, directory: str) -> None:
    """Create and remove an empty partial file where the real one will go: the only sure test
    (a read-only mount, /proc, a directory without write permission all fail it)."""
    try:
        with stopping.held():
            descriptor, probe = tempfile.mkstemp(dir=directory, suffix=".partial")
            os.close(descriptor)
            os.unlink(probe)
    except OSError as error:
        raise ConfigError(f"{flag} {path}: no file can be created in {directory} "
                          f"({error.strerror or error}); give a path in a directory you can "
                          "write to") from None


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


_LIVE_PARTIALS: set = set()  # paths of partial files not yet renamed into place or removed


def remove_leftovers() -> None:
    """Remove every partial file still there: a command that ended by an error or a signal."""
    with stopping.held():
        for partial_path in list(_LIVE_PARTIALS):
            with contextlib.suppress(OSError):
                os.unlink(partial_path)
            _LIVE_PARTIALS.discard(partial_path)


class PartialFile:
    """A file being written under a temporary name beside its target, until `commit()`."""

    def __init__(self, flag: str, path: str):
        self.flag = flag
        self.path = path
        self.target = os.path.realpath(path)  # through a symbolic link: the file it points to
        with self._reported(), stopping.held():
            descriptor, self._partial_path = tempfile.mkstemp(
                dir=os.path.dirname(self.target), suffix=".partial")
            _LIVE_PARTIALS.add(self._partial_path)
            self.file = os.fdopen(descriptor, "w", encoding="utf-8", newline="\n")

    def write(self, text: str) -> None:
        with self._reported():
            self.file.write(text)

    def commit(self) -> None:
        """Rename the finished file over its target, with the permissions open() would give."""
        with self._reported(), stopping.held():
            self.file.close()
            os.chmod(self._partial_path, 0o666 & ~_umask())  # mkstemp made it 0600
            os.replace(self._partial_path, self.target)
            _LIVE_PARTIALS.discard(self._partial_path)

    def discard(self) -> None:
        with stopping.held():
            with contextlib.suppress(OSError):  # closing flushes, which fails again on a full
                self.file.close()               # disk
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._partial_path)
            _LIVE_PARTIALS.discard(self._partial_path)

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
            with stopping.held():  # every text is written before any file is renamed into
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
