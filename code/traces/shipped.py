"""The traces shipped with servesim, by short name: `--trace azure-conv` instead of a path.

Each file in `code/traces/data/` is a public trace, gzip-compressed, with its source, license and
row count in the README beside it. Its short name is its file name without the extensions
(`azure-conv.csv.gz` is `azure-conv`), so a trace added to the folder is named by what it is
called there. A `--trace` value that is a file is read as a path first: a learner's own
`azure-conv` file in the working directory is never shadowed by the shipped one.
"""

from pathlib import Path

from workload import WorkloadError

DATA = Path(__file__).resolve().parent / "data"


def shipped_traces() -> dict[str, Path]:
    """Short name -> file, for every trace in the data folder."""
    return {path.name.split(".", 1)[0]: path for path in sorted(DATA.glob("*.gz"))}


def trace_path(name_or_path: str) -> str:
    """The file to read for a `--trace` value: the path itself if there is one, else the
    shipped trace of that short name; neither is one line naming what would be valid."""
    if Path(name_or_path).exists():
        return name_or_path  # reading it says what is wrong with it, if anything
    shipped = shipped_traces()
    if name_or_path not in shipped:
        raise WorkloadError(f"{name_or_path}: cannot read trace (no such file, nor a shipped "
                            f"trace: {', '.join(shipped)}; see code/traces/README.md)")
    return str(shipped[name_or_path])
