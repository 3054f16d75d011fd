"""Text columns: the one aligner every table of the reports and commands uses.

    aligned([("mode", "tok/s"), ("NAIVE", "96.5"), ("CONTINUOUS", "1,234.0")], 1)
    ->  ["mode          tok/s",
         "NAIVE          96.5",
         "CONTINUOUS  1,234.0"]

The first `num_text_columns` columns (names) are left-aligned, the rest (numbers) right-aligned,
each as wide as its widest cell, two spaces between; trailing spaces are dropped.
"""


def aligned(rows: list, num_text_columns: int) -> list[str]:
    """`rows` of text cells (the header first, if any), as aligned lines."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) if i < num_text_columns else cell.rjust(width)
                      for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
            for row in rows]
