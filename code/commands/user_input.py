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
                works on that text, so a file that changes while servesim runs cannot give two
                passes different rows.
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

MAX_FILE_BYTES = 256 * 2**20   # 256 MiB: 85x the largest shipped trace, well inside the memory
MAX_JSON_CHARS = 2**20         # a JSON flag on the command line: 1 Mi characters
MAX_JSON_DEPTH = 64            # vLLM's --save-result JSON nests 2 deep, a trace line 2
MAX_INT_DIGITS = 18            # below 2^63: every integer a counter, a length or a time needs

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
    try:  # O_NONBLOCK: should a FIFO take the file's place since the stat, opening it won't wait
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as file:
            kind = os.fstat(file.fileno()).st_mode
            if not stat.S_ISREG(kind):
                raise error(f"{where}: is {file_kind(kind)}, not a regular file")
            data = file.read(max_bytes + 1)
    except OSError as failure:
        raise error(f"{where}: cannot read {what} ({failure.strerror or failure})") from None
    if len(data) > max_bytes:
        raise _too_large(where, max_bytes, error)
    if gzipped:
        data = _gunzipped(where, what, data, max_bytes, error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise error(f"{where}: not a text file; servesim reads UTF-8 text") from None


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
