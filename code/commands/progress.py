"""A long command's progress: one line on stderr, rewritten in place, wiped when a run ends.

    CONTINUOUS+CHUNKED: 1,234.5 s simulated, 4,321/10,000 requests done, 12,345 steps
    point 7/40 (request_rate 16), CONTINUOUS: 12.5 s simulated, 310/1,000 requests done, ...

Shown once the command has taken SHOW_AFTER_S of wall time (counted from its start, so that a
sweep of many short points or diagnose's many runs shows it too, each run labelled), only when
stderr is a terminal, and never with --format json (a script reading the output should see
nothing else). A long run is also announced before it starts (estimate.py). This is the
shell's business: the engine itself never reads the wall clock.
"""

import sys
import time

SHOW_AFTER_S = 1.0      # wall seconds of the command before the line appears
REDRAW_EVERY_S = 0.25   # and between two redraws
CHECK_EVERY_STEPS = 256  # the wall clock is read this seldom, to cost the engine nothing


class _Command:
    started_s = time.monotonic()


def new_command() -> None:
    """commands/cli.py, as a command starts: the wait before the first line counts from now."""
    _Command.started_s = time.monotonic()


class Progress:
    def __init__(self, mode_name: str, num_requests, stream=None, wall_clock=time.monotonic,
                 command_started_s=None):
        """`mode_name`: how the line names the run; `num_requests`: the workload's total, or
        None when unknown; `command_started_s`: when the command began, on `wall_clock`
        (default: when new_command was called)."""
        self.mode_name = mode_name
        self.num_requests = num_requests
        self.stream = stream or sys.stderr
        self.wall_clock = wall_clock
        self.started_s = wall_clock()
        if command_started_s is None:
            command_started_s = _Command.started_s
        self.next_check_step = CHECK_EVERY_STEPS
        self.next_draw_s = command_started_s + SHOW_AFTER_S
        self.shown = False

    def __call__(self, recorder, clock_s: float) -> None:
        if recorder.num_steps < self.next_check_step:
            return
        self.next_check_step = recorder.num_steps + CHECK_EVERY_STEPS
        now_s = self.wall_clock()
        if now_s < self.next_draw_s:
            return
        self.next_draw_s = now_s + REDRAW_EVERY_S
        total = f"/{self.num_requests:,}" if self.num_requests else ""
        self.stream.write(f"\r{self.mode_name}: {clock_s:,.1f} s simulated, "
                          f"{recorder.num_ended:,}{total} requests done, "
                          f"{recorder.num_steps:,} steps\033[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def wanted(output_format: str) -> bool:
    return output_format != "json" and sys.stderr.isatty()
