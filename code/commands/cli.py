"""The command line: `python3 code/main.py [command] [flags]`, one module per command.

    compare       the modes side by side on one workload (the default command)   compare.py
    run           one mode in depth: vllm bench serve's result block              run.py
    sweep         rising load in each mode: the latency-throughput curve          sweep.py
    kv-waste      KV waste of contiguous, power-of-two and paged reservations     kv_waste.py
    lesson-check  the lesson's numbers against physics and simulation             lesson_check.py
    diagnose      the scheduler diagnosis: which default limits a config          diagnose.py
    recommend     the fewest GPUs and flags that serve a target load in the SLO   recommend.py
    presets       the GPU and model presets                                       show_presets.py
    calibration   the virtual clock against published measurements                calibration.py

Each command module adds its own subcommand (`add_parser`) and returns the text to print; this
file is the one place that talks to the terminal. Every way out is one line at most:

    exit 0     the command's output on stdout
    exit 2     a bad value: one line on stderr naming it and what would be valid; nothing is
               written, since nothing is written before every input is checked
    exit 1     a file that could not be written after the run (a full disk): one line
    exit 128+N signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP, ...): one line, and no partial
               file left behind (stopping.py, output_files.py)

A line printed here is one line whatever it quotes: a control character in a path or an id
(a newline, an escape) is printed escaped, `\\n`. Text the terminal's encoding cannot show (a
non-ASCII request id under LANG=C or PYTHONIOENCODING=ascii) is printed as `\\xe9`, never a
traceback.
"""

import argparse
import difflib
import os
import signal
import sys
from dataclasses import dataclass
from typing import Callable

from commands import (calibration, compare, diagnose, estimate, invariants, kv_waste,
                      lesson_check, progress, recommend, run, show_presets, stopping,
                      sweep)
from commands.output_files import OutputError, remove_leftovers
from config import ConfigError, Knobs
from modes import MODES
from workload import WorkloadError

COMMANDS = (compare, run, sweep, kv_waste, lesson_check, diagnose, recommend, show_presets,
            calibration)


@dataclass(frozen=True)
class Context:
    """What main.py hands every command: the engine loop and the knobs at its top."""
    simulate: Callable  # main.simulate
    knobs: Knobs


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2), not a usage dump; and no
    flag is abbreviated: `--mode` on a command without it is refused under its own name, never
    read as the `--model` it begins."""

    # A flag a learner may carry over from another command -> why this command has none.
    flag_hints: dict[str, str] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str):
        self.exit(2, f"servesim: error: {one_line(message)} (see --help)\n")

    def unrecognized(self, command: str, extras: list[str],
                     all_flags: dict[str, list[str]]) -> str:
        """One line for arguments this command does not take: the first unknown one, why it is
        not here (a hint, or the commands that take it), else the closest flag that is."""
        flag = next((extra for extra in extras if extra.startswith("-")), extras[0])
        name = flag.split("=", 1)[0]
        mine = [option for option in self._option_string_actions if option.startswith("--")]
        if not name.startswith("-"):
            return f"unrecognized argument {name!r}: {command} takes flags only"
        if name in self.flag_hints:
            return f"{command} has no {name}: {self.flag_hints[name]}"
        elsewhere = [other for other, flags in all_flags.items() if name in flags]
        if elsewhere:
            return f"{command} has no {name} (a flag of {', '.join(elsewhere)})"
        close = difflib.get_close_matches(name, mine, n=1)
        suggestion = f"; the closest valid flag is {close[0]}" if close else ""
        return f"unrecognized argument {name}{suggestion}"


def build_parser(knobs: Knobs) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python3 code/main.py",
        description="servesim: an LLM serving engine's scheduler on a virtual clock. "
                    "Without a command, runs `compare`.")
    subparsers = parser.add_subparsers(dest="command_name", metavar="command")
    for command in COMMANDS:
        command.add_parser(subparsers, knobs)
    parser.commands = subparsers.choices  # name -> its parser, for unrecognized()
    return parser


def parse(parser: OneLineParser, argv: list[str]) -> argparse.Namespace:
    """parse_args, with an unknown argument named by the command that was given it."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        command_parser = parser.commands.get(args.command_name, parser)
        all_flags = {name: list(sub._option_string_actions)
                     for name, sub in parser.commands.items()}
        parser.error(command_parser.unrecognized(args.command_name, extras, all_flags))
    return args


def main(argv: list[str], simulate: Callable, knobs: Knobs) -> int:
    previous_handlers = stopping.install()
    if hasattr(sys.stdout, "reconfigure"):  # any text survives an ASCII terminal
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        with stopping.armed():
            try:
                return run_command(argv, simulate, knobs)
            finally:
                remove_leftovers()  # of a command ended by an error or a signal
    except (KeyboardInterrupt, stopping.Stopped) as stop:
        signum = getattr(stop, "signum", signal.SIGINT)  # KeyboardInterrupt: Ctrl-C
        stopping.say_stopped(signum)
        return 128 + signum
    finally:
        stopping.restore(previous_handlers)


def one_line(text: str) -> str:
    """`text` with every character that is not printable (a newline, a tab, an escape, a lone
    surrogate) written as its Python escape, so that a message stays one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace")
                   .decode("ascii") for c in text)


def refuse(error: Exception, status: int) -> int:
    print(f"servesim: error: {one_line(str(error))}", file=sys.stderr)
    return status


def run_command(argv: list[str], simulate: Callable, knobs: Knobs) -> int:
    try:
        knobs.check(tuple(MODES))
        invariants.wanted()  # an unknown SERVESIM_CHECK_INVARIANTS is refused before any run
        estimate.new_command()
        progress.new_command()
    except ConfigError as error:
        return refuse(error, 2)
    parser = build_parser(knobs)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["compare", *argv]
    args = parse(parser, argv)
    if args.command_name is None:
        parser.print_help()
        return 0
    try:
        print(args.command(args, Context(simulate, knobs)))
        sys.stdout.flush()  # while a signal still unwinds: after this, it exits at once
        return 0
    except (ConfigError, WorkloadError) as error:
        return refuse(error, 2)
    except OutputError as error:
        return refuse(error, 1)
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 0
