"""A long run's progress: one line on stderr, rewritten in place, wiped when the run ends.

    CONTINUOUS+CHUNKED: 1,234.5 s simulated, 4,321/10,000 requests done, 12,345 steps

Shown only for a run that has taken over two seconds of wall time, only when stderr is a
terminal, and never with --format json (a script reading the output should see nothing else).
This is the shell's business: the engine itself never reads the wall clock.
"""

import sys
import time

SHOW_AFTER_S = 2.0      # wall seconds before the line appears
REDRAW_EVERY_S = 0.25   # and between two redraws
CHECK_EVERY_STEPS = 1024  # the wall clock is read this seldom, to cost the engine nothing


class Progress:
    def __init__(self, mode_name: str, num_requests, stream=None, wall_clock=time.monotonic):
        """`num_requests`: the workload's total, or None when unknown."""
        self.mode_name = mode_name
        self.num_requests = num_requests
        self.stream = stream or sys.stderr
        self.wall_clock = wall_clock
        self.started_s = wall_clock()
        self.next_check_step = CHECK_EVERY_STEPS
        self.next_draw_s = self.started_s + SHOW_AFTER_S
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
