"""What the user hands servesim (a file to read, a JSON text), taken in only when it is sane.

Every file servesim reads (`--trace`, `--observed`) and every JSON text it parses
(`--speculative-config`, `--observed`, a Mooncake trace's lines) goes through here, so that one
set of rules holds for all of them. A refusal is one `error` line (ConfigError or WorkloadError,
both exit status 2) naming the problem and what would be valid:

    a file      must be a regular file: a pipe (FIFO), a device (/dev/zero), a directory or a
                socket is refused by its kind, found with os.stat before anything is opened, so
                a FIFO never blocks the run; /dev/stdin counts as what it points to (a file
                redirected in with `<` is read, a pipe or a terminal is refused). It is read
                once, whole, at most MAX_FILE_BYTES, and decoded as UTF-8: every later pass
                works on what was read, so a file that changes while servesim runs cannot give
                two passes different rows. A trace is kept gzip-compressed and decoded line by
                line on each pass (`CompressedText`), never held whole as text.
    a JSON text at most MAX_JSON_CHARS characters (files: MAX_FILE_BYTES), nested at most
                MAX_JSON_DEPTH deep (Python's parser recurses), numbers finite (NaN, Infinity
                and 1e999, a float that overflows, are refused), integers of at most
                MAX_INT_DIGITS digits (checked before int() would refuse a 5,000-digit one with
                its own error), and strings that are text (no lone UTF-16 surrogate, which no
                output could print).
"""

import gzip
import io
import json
import os
import re
import stat
import zlib
from typing import Iterator

MAX_FILE_BYTES = 256 * 2**20   # 256 MiB: 85x the largest shipped trace, well inside the memory
MAX_JSON_CHARS = 2**20         # a JSON flag on the command line: 1 Mi characters
MAX_JSON_DEPTH = 64            # vLLM's --save-result JSON nests 2 deep, a trace line 2
MAX_INT_DIGITS = 18            # below 2^63: every integer a counter, a length or a time needs
READ_CHUNK_BYTES = 2**20       # a file is read (and a trace compressed) a MiB at a time

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_KINDS = ((stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISSOCK, "a socket"))


class JsonRefused(ValueError):
    """A JSON text servesim will not take; the message says why, in a few words."""


def file_kind(mode: int) -> str:
    """What an os.stat mode names, in words: 'a pipe (FIFO)', 'a directory', ..."""
    for is_kind, words in _KINDS:
        if is_kind(mode):
            return words
    return "not a regular file"


def read_text_file(where: str, path: str, error: type, what: str = "it",
                   max_bytes: int = MAX_FILE_BYTES, gzipped: bool = False) -> str:
    """The whole of a regular file as text, read once; `where` begins each refusal
    (`--observed FILE`), `what` names the file in it ("trace"), `error` is its type.
    `gzipped`: the file is gzip data (the shipped traces), decompressed under the same cap."""
    data = b"".join(_file_chunks(where, path, error, what, max_bytes))
    if gzipped:
        data = _gunzipped(where, what, data, max_bytes, error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _not_text(where, error) from None


class CompressedText:
    """A regular file read once, as read_text_file reads it, but kept gzip-compressed (a `.gz`
    file as it is) and decoded line by line on each pass (`lines`), so that a long file is never
    held as text: a trace of a million requests takes a fifth of its size. Its text is checked
    as a pass meets it (UTF-8, gzip data whole, at most max_bytes characters): the first pass,
    which reads it all, refuses what read_text_file would."""

    def __init__(self, where: str, path: str, error: type, what: str = "it",
                 max_bytes: int = MAX_FILE_BYTES, gzipped: bool = False):
        self.where, self.error, self.what, self.max_bytes = where, error, what, max_bytes
        chunks = _file_chunks(where, path, error, what, max_bytes)
        if gzipped:
            self.data = b"".join(chunks)
        else:
            compressor = zlib.compressobj(1, wbits=31)  # gzip's format, its fastest level
            self.data = b"".join([*map(compressor.compress, chunks), compressor.flush()])

    def lines(self, max_chars: int) -> Iterator[str]:
        """The text's lines, split as a file opened with newline="" splits them (the csv module
        sees quoted line breaks), each cut at max_chars + 1 characters (the caller refuses a
        line that long)."""
        num_chars = 0
        with io.TextIOWrapper(gzip.GzipFile(fileobj=io.BytesIO(self.data)),
                              encoding="utf-8-sig", newline="") as text:
            while True:
                try:
                    line = text.readline(max_chars + 1)
                except UnicodeDecodeError:
                    raise _not_text(self.where, self.error) from None
                except (OSError, EOFError) as failure:  # not gzip data, or cut short
                    raise self.error(f"{self.where}: cannot read {self.what} ({failure})") from None
                num_chars += len(line)
                if num_chars > self.max_bytes:
                    raise _too_large(self.where, self.max_bytes, self.error)
                if not line:
                    return
                yield line


def _file_chunks(where: str, path: str, error: type, what: str,
                 max_bytes: int) -> Iterator[bytes]:
    """A regular file's bytes, at most max_bytes, in chunks of READ_CHUNK_BYTES as they are
    read; what it refuses by the file's kind or size is refused before the first."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise error(f"{where}: cannot read {what} (no such file)") from None
    except ValueError:  # a NUL character, which no path may hold
        raise error(f"{where}: cannot read {what} (a NUL character in its name)") from None
    except OSError as failure:
        raise error(f"{where}: cannot read {what} ({failure.strerror or failure})") from None
    if not stat.S_ISREG(status.st_mode):
        raise error(f"{where}: is {file_kind(status.st_mode)}, not a regular file; servesim "
                    "reads a file whole, so give a file's path")
    if status.st_size > max_bytes:  # (a file of /proc says 0 and is capped as it is read)
        raise _too_large(where, max_bytes, error)
    num_bytes = 0
    try:  # O_NONBLOCK: should a FIFO take the file's place since the stat, opening it won't wait
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as file:
            kind = os.fstat(file.fileno()).st_mode
            if not stat.S_ISREG(kind):
                raise error(f"{where}: is {file_kind(kind)}, not a regular file")
            while chunk := file.read(min(READ_CHUNK_BYTES, max_bytes + 1 - num_bytes)):
                num_bytes += len(chunk)
                if num_bytes > max_bytes:
                    raise _too_large(where, max_bytes, error)
                yield chunk
    except OSError as failure:
        raise error(f"{where}: cannot read {what} ({failure.strerror or failure})") from None


def _not_text(where: str, error: type) -> Exception:
    return error(f"{where}: not a text file; servesim reads UTF-8 text")


def _gunzipped(where: str, what: str, data: bytes, max_bytes: int, error: type) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as file:
            text = file.read(max_bytes + 1)
    except (OSError, EOFError) as failure:  # not gzip data, or cut short
        raise error(f"{where}: cannot read {what} ({failure})") from None
    if len(text) > max_bytes:
        raise _too_large(where, max_bytes, error)
    return text


def _too_large(where: str, max_bytes: int, error: type) -> Exception:
    return error(f"{where}: larger than {max_bytes:,} bytes ({max_bytes / 2**20:g} MiB), more "
                 "than servesim reads; give a smaller file")


def parse_json(text: str, max_chars: int = MAX_JSON_CHARS):
    """`json.loads(text)` within the rules above; a breach raises JsonRefused (its caller
    turns it into a refusal naming the flag), bad syntax json.JSONDecodeError as json does."""
    if len(text) > max_chars:
        raise JsonRefused(f"longer than {max_chars:,} characters")
    if nesting_depth(text) > MAX_JSON_DEPTH:
        raise JsonRefused(f"nested more than {MAX_JSON_DEPTH} deep")
    value = json.loads(text, parse_int=_integer, parse_float=_finite_float,
                       parse_constant=_no_constant)
    if _SURROGATE_ESCAPE.search(text):
        _check_text(value)
    return value


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest, its strings left out (a bracket in
    a string nests nothing). Counts only brackets, so a long flat list costs little."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0  # too few brackets to nest that deep
    depth = deepest = 0
    for bracket in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonRefused(f"an integer of {len(digits.lstrip('-')):,} digits; at most "
                          f"{MAX_INT_DIGITS} are taken")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JsonRefused(f"{text[:20]} is too large for a number (it overflows to infinity)")
    return value


def _no_constant(name: str):
    raise JsonRefused(f"{name} is not a finite number")


def _check_text(value) -> None:
    """No string (key or value) may hold half a UTF-16 surrogate pair."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRefused("a string holds half of a UTF-16 surrogate pair (\\ud800 to "
                              "\\udfff alone), which is no text") from None
    elif isinstance(value, list):
        for item in value:
            _check_text(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
