"""Trace file formats: reading the requests a real service logged, one row at a time.

Four formats, told apart by their first line (or named with `--trace-format`):

    format    first line                                   time           prompt, output (tokens)
    azure     TIMESTAMP,ContextTokens,GeneratedTokens      date and time  ContextTokens,
                                                                          GeneratedTokens
    burstgpt  Timestamp,Model,Request tokens,              seconds        Request tokens,
              Response tokens,Total tokens,Log Type                       Response tokens
    mooncake  {"timestamp": 0, "input_length": 6758,       milliseconds   input_length,
               "output_length": 500, "hash_ids": [...]}                   output_length
    csv       arrival_s,prompt_len,output_len[,id]         seconds        prompt_len, output_len

Azure's timestamps look like `2023-11-16 18:17:03.9799600`: seven fractional digits (100 ns
ticks), one more than `strptime`'s `%f` accepts, so the fraction is read by hand. Mooncake's rows
may say what their tokens are, for prefix caching: `hash_ids` (one id per 512 prompt tokens, or
`--hash-block-size`; equal ids, equal tokens) or `prompt_token_ids`, and `output_token_ids`
(what the request will generate); and an `id`. BurstGPT logs a
failed request with 0 response tokens; its reader marks such rows `failed` (trace_replay.py skips
and counts them). Other columns (BurstGPT's Model, Log Type) are ignored.

A trace is read once, whole (commands/user_input.py: a regular file of at most 256 MiB of UTF-8),
and kept gzip-compressed; every pass over it (the check, then each mode) decodes and parses it
line by line, so a file that changes while servesim runs cannot give two passes different rows,
and a long trace is never held as text. No line may pass MAX_LINE_CHARS
characters: a file that is not a trace (one huge line) is refused there.
A bad row raises one `WorkloadError` line naming the file, the line number and what is wrong.
A file whose name ends in `.gz` is read through `gzip`, as the shipped traces are (shipped.py).
"""

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Iterator, Optional

from commands.user_input import CompressedText, JsonRefused, parse_json
from config import MAX_TOKENS, Range
from request import TokenContent
from workload import WorkloadError

# The longest line a trace may have. A Mooncake line that lists a 131,072-token prompt's token
# ids takes about a megabyte; 16 Mi characters leave room for that and stop a file that is not a
# trace before it fills the memory.
MAX_LINE_CHARS = 16 * 2**20


@dataclass(slots=True)
class TraceRow:
    line: int               # line number in the file, for error messages
    timestamp_s: float      # on the trace's own clock
    timestamp_text: str     # as written, for error messages
    prompt_len: int
    output_len: int
    request_id: Optional[str] = None  # the plain csv format's optional id column, Mooncake's id
    failed: bool = False    # BurstGPT: the service logged this request as failed
    content: Optional[TokenContent] = None  # what its tokens are, where the trace says (Mooncake)


# -- reading a timestamp ---------------------------------------------------------------------

EPOCH = datetime(1970, 1, 1)


def azure_seconds(text: str) -> float:
    """'2023-11-16 18:17:03.9799600' -> seconds since 1970 (no time zone: only gaps matter).

    A float holds such a time to within 0.25 microseconds, far below one engine step.
    """
    whole, _, fraction = text.partition(".")
    moment = datetime.fromisoformat(whole)  # raises ValueError on anything but a date and time
    if moment.tzinfo is not None or (fraction and not fraction.isdigit()):
        raise ValueError(text)
    seconds = (moment - EPOCH) / timedelta(seconds=1)
    if fraction:
        seconds += int(fraction) / 10 ** len(fraction)
    return seconds


# -- the CSV formats -------------------------------------------------------------------------

@dataclass(frozen=True)
class CsvLayout:
    """Which columns of a CSV trace hold the time and the lengths, and how to read the time."""
    name: str
    timestamp_column: str
    prompt_column: str
    output_column: str
    to_seconds: Callable[[str], float]  # timestamp text -> seconds on the trace's clock
    timestamp_kind: str                 # what a timestamp must look like, for error messages
    zero_output_means_failed: bool = False  # BurstGPT's failed requests
    id_column: Optional[str] = None

    @property
    def required_columns(self) -> tuple[str, str, str]:
        return (self.timestamp_column, self.prompt_column, self.output_column)


CSV_LAYOUTS = {
    "azure": CsvLayout("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", azure_seconds,
                       "a date and time like 2023-11-16 18:17:03.9799600"),
    "burstgpt": CsvLayout("burstgpt", "Timestamp", "Request tokens", "Response tokens", float,
                          "a number of seconds", zero_output_means_failed=True),
    "csv": CsvLayout("csv", "arrival_s", "prompt_len", "output_len", float,
                     "a number of seconds", id_column="id"),
}
TRACE_FORMATS = ("azure", "mooncake", "burstgpt", "csv")


def read_csv_rows(path: str, text: CompressedText, layout: CsvLayout) -> Iterator[TraceRow]:
    reader = csv.reader(capped_lines(path, text))
    try:
        columns = column_indexes(path, next(reader, []), layout)
        for fields in reader:
            if fields:  # skip blank lines
                yield csv_row(path, reader.line_num, fields, columns, layout)
    except csv.Error as error:
        raise trace_error(path, reader.line_num, f"not valid CSV ({error})") from None


def column_indexes(path: str, header: list[str], layout: CsvLayout) -> dict[str, int]:
    """Where each column the layout reads sits in the header (the id column only if present)."""
    names = [name.strip() for name in header]
    missing = [column for column in layout.required_columns if column not in names]
    if missing:
        raise trace_error(path, 1, f"missing column {', '.join(missing)}; a {layout.name} trace's "
                                   f"header names {','.join(layout.required_columns)}")
    columns = {column: names.index(column) for column in layout.required_columns}
    if layout.id_column is not None and layout.id_column in names:
        columns[layout.id_column] = names.index(layout.id_column)
    return columns


def csv_row(path: str, line: int, fields: list[str], columns: dict[str, int],
            layout: CsvLayout) -> TraceRow:
    timestamp_text = required_field(path, line, fields, columns, layout.timestamp_column)
    timestamp_s = parse_timestamp(path, line, layout.timestamp_column, timestamp_text,
                                  layout.to_seconds, layout.timestamp_kind)
    prompt_len = parse_tokens(path, line, layout.prompt_column,
                              required_field(path, line, fields, columns, layout.prompt_column), 1)
    min_output = 0 if layout.zero_output_means_failed else 1
    output_len = parse_tokens(path, line, layout.output_column,
                              required_field(path, line, fields, columns, layout.output_column),
                              min_output)
    request_id = field_text(fields, columns, layout.id_column) if layout.id_column in columns else ""
    return TraceRow(line, timestamp_s, timestamp_text, prompt_len, output_len,
                    checked_request_id(path, line, request_id or None),
                    failed=layout.zero_output_means_failed and output_len == 0)


def field_text(fields: list[str], columns: dict[str, int], column: str) -> str:
    """The column's text in this row, stripped ("" where the row is short)."""
    index = columns[column]
    return fields[index].strip() if index < len(fields) else ""


def required_field(path: str, line: int, fields: list[str], columns: dict[str, int],
                   column: str) -> str:
    text = field_text(fields, columns, column)
    if not text:
        raise trace_error(path, line, f"missing value for {column}")
    return text


# -- Mooncake's JSON lines -------------------------------------------------------------------

MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
DEFAULT_HASH_BLOCK_SIZE = 512  # prompt tokens per hash id in Mooncake's FAST'25 release traces
HASH_ID_SOURCE = 1             # a hash id h names the tokens of source (1, h)


def read_mooncake_rows(path: str, text: CompressedText, hash_block_size: int,
                       shared_ids: Optional[frozenset] = None) -> Iterator[TraceRow]:
    """One JSON object a line; its numbers go through the same checks as CSV text.
    `shared_ids`: the hash ids more than one row names (traces/replay.py), if known."""
    for line, line_text in enumerate(capped_lines(path, text), start=1):
        if line_text.strip():
            yield mooncake_row(path, line, line_text, hash_block_size, shared_ids)


def mooncake_row(path: str, line: int, text: str, hash_block_size: int,
                 shared_ids: Optional[frozenset] = None) -> TraceRow:
    try:
        record = parse_json(text)
    except json.JSONDecodeError as error:
        raise trace_error(path, line, f"not a JSON object ({error.msg})") from None
    except JsonRefused as error:
        raise trace_error(path, line, str(error)) from None
    if not isinstance(record, dict):
        raise trace_error(path, line, "not a JSON object")
    for key in MOONCAKE_FIELDS:
        if key not in record:
            raise trace_error(path, line, f"missing field {key}")
    timestamp_text = str(record["timestamp"])
    timestamp_ms = parse_timestamp(path, line, "timestamp", timestamp_text, float,
                                   "a number of milliseconds")
    prompt_len = parse_tokens(path, line, "input_length", str(record["input_length"]), 1)
    output_len = parse_tokens(path, line, "output_length", str(record["output_length"]), 1)
    request_id = record.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int, type(None))):
        raise trace_error(path, line, f"id must be a string or an integer, got {request_id!r}")
    request_id = checked_request_id(path, line, str(request_id) if request_id not in (None, "")
                                    else None)
    return TraceRow(line, timestamp_ms / 1000, timestamp_text + " ms", prompt_len, output_len,
                    request_id, content=mooncake_content(path, line, record, prompt_len,
                                                         output_len, hash_block_size,
                                                         shared_ids))


def mooncake_content(path: str, line: int, record: dict, prompt_len: int, output_len: int,
                     hash_block_size: int,
                     shared_ids: Optional[frozenset] = None) -> Optional[TokenContent]:
    """What the row says its tokens are: `hash_ids` (Mooncake's: one id per `hash_block_size`
    prompt tokens, equal ids meaning equal tokens; the last block may be cut short) or
    `prompt_token_ids`, and optionally `output_token_ids` (the tokens it will generate, e.g. a
    recorded answer, so that the next turn of a conversation can find them cached)."""
    if "hash_ids" in record and "prompt_token_ids" in record:
        raise trace_error(path, line, "give hash_ids or prompt_token_ids, not both")
    outputs = None
    if "output_token_ids" in record:
        outputs = token_ids(path, line, record, "output_token_ids")
        if len(outputs) > output_len:
            raise trace_error(path, line, f"output_token_ids holds {len(outputs)} tokens, more "
                                          f"than output_length {output_len}")
    if "hash_ids" in record:
        hash_ids = token_ids(path, line, record, "hash_ids")
        num_ids = -(-prompt_len // hash_block_size)
        if len(hash_ids) < num_ids:
            raise trace_error(path, line, f"{len(hash_ids)} hash_ids cover "
                                          f"{len(hash_ids) * hash_block_size} tokens, fewer than "
                                          f"input_length {prompt_len} (--hash-block-size "
                                          f"{hash_block_size})")
        pieces = [((HASH_ID_SOURCE, h), hash_block_size) for h in hash_ids[:num_ids]]
        pieces[-1] = (pieces[-1][0], prompt_len - hash_block_size * (num_ids - 1))
        return TokenContent.of(pieces, outputs,
                               shared_length(hash_ids[:num_ids], hash_block_size, shared_ids))
    if "prompt_token_ids" in record:
        prompt = token_ids(path, line, record, "prompt_token_ids")
        if len(prompt) != prompt_len:
            raise trace_error(path, line, f"prompt_token_ids holds {len(prompt)} tokens, "
                                          f"input_length says {prompt_len}")
        return TokenContent.of([prompt], outputs)
    if outputs is not None:
        raise trace_error(path, line, "output_token_ids needs the prompt's tokens too "
                                      "(hash_ids or prompt_token_ids)")
    return None


def token_ids(path: str, line: int, record: dict, key: str) -> tuple[int, ...]:
    values = record[key]
    if not (isinstance(values, list)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)):
        raise trace_error(path, line, f"{key} must be a list of whole numbers >= 0")
    return tuple(values)


# -- checks shared by every format -----------------------------------------------------------

def parse_timestamp(path: str, line: int, column: str, text: str,
                    to_seconds: Callable[[str], float], kind: str) -> float:
    try:
        value = to_seconds(text)
    except ValueError:
        raise trace_error(path, line, f"{column} must be {kind}, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise trace_error(path, line, f"{column} must be a finite time >= 0, got {text}")
    return value


def parse_tokens(path: str, line: int, column: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise trace_error(path, line, f"{column} must be a whole number of tokens, "
                                      f"got {text!r}") from None
    tokens = Range(minimum, MAX_TOKENS, integer=True)
    if not tokens.contains(value):
        raise trace_error(path, line, f"{column} must be {tokens.describe()}, got {value}")
    return value


MAX_REQUEST_ID_CHARS = 256  # an id is printed in tables, timelines and step logs


def checked_request_id(path: str, line: int, request_id: Optional[str]) -> Optional[str]:
    """A request id is printable text on one line (it labels rows of tables and timelines):
    no newline, tab or other control character, at most MAX_REQUEST_ID_CHARS characters."""
    if request_id is None:
        return None
    if not request_id.isprintable() or len(request_id) > MAX_REQUEST_ID_CHARS:
        raise trace_error(path, line, f"request id {request_id[:40]!r} must be printable text "
                          f"of at most {MAX_REQUEST_ID_CHARS} characters, with no control "
                          "character")
    return request_id


def shared_length(hash_ids: list[int], hash_block_size: int,
                  shared_ids: Optional[frozenset]) -> Optional[int]:
    """Prompt tokens before the first hash id no other row names (None: unknown, or none)."""
    if shared_ids is None:
        return None
    for index, hash_id in enumerate(hash_ids):
        if hash_id not in shared_ids:
            return index * hash_block_size
    return None


def trace_error(path: str, line: int, problem: str) -> WorkloadError:
    return WorkloadError(f"{path}:{line}: {problem}")


def capped_lines(path: str, text: CompressedText) -> Iterator[str]:
    """The trace's lines (split as a file opened with newline="" splits them, so that the csv
    module sees quoted line breaks), refusing one longer than MAX_LINE_CHARS."""
    for line_number, line in enumerate(text.lines(MAX_LINE_CHARS), start=1):
        if len(line) > MAX_LINE_CHARS:
            raise trace_error(path, line_number, f"longer than {MAX_LINE_CHARS:,} characters; a "
                                                 "trace line holds one request")
        yield line


def read_trace_text(path: str) -> CompressedText:
    """The trace file, read once (see the module docstring) and kept compressed; a `.gz` file
    as it is, its text under the same size cap."""
    return CompressedText(f"--trace {path}", path, WorkloadError, what="trace",
                          gzipped=path.endswith(".gz"))


# -- which format ----------------------------------------------------------------------------

def detect_format(path: str, text: CompressedText) -> str:
    """Tell the format from the first line: a JSON object is Mooncake, else the CSV header."""
    first_line = next(capped_lines(path, text), "")
    if not first_line.strip():
        raise trace_error(path, 1, "empty first line; a trace starts with its CSV header or, "
                                   "for Mooncake, its first JSON object")
    if first_line.lstrip().startswith("{"):
        return "mooncake"
    header = {name.strip() for name in next(csv.reader([first_line]), [])}
    for name, layout in CSV_LAYOUTS.items():
        if set(layout.required_columns) <= header:
            return name
    known = "; ".join(f"{name}: {','.join(layout.required_columns)}"
                      for name, layout in CSV_LAYOUTS.items())
    raise trace_error(path, 1, f"cannot tell the trace format from this line; expected a header "
                               f"({known}) or a Mooncake JSON object, or name it with "
                               f"--trace-format")


def trace_rows(path: str, text: CompressedText, trace_format: str,
               hash_block_size: int = DEFAULT_HASH_BLOCK_SIZE,
               shared_ids: Optional[frozenset] = None) -> Iterator[TraceRow]:
    """The rows of a trace's text (read_trace_text); `path` names it in refusals. `shared_ids`:
    Mooncake's hash ids that more than one row names, if known (traces/replay.py)."""
    if trace_format == "mooncake":
        return read_mooncake_rows(path, text, hash_block_size, shared_ids)
    return read_csv_rows(path, text, CSV_LAYOUTS[trace_format])
