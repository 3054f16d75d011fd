"""Make outputs/step-page.png, the picture of `run --html` in code/reports/README.md.

    python3 tests/page_screenshot.py        # needs headless Chromium (apt-get install chromium)

It writes the page of a small run (a shared prompt prefix, a pool small enough to preempt) to a
temporary directory and has Chromium photograph one step: a long prompt chunked beside the
decodes, a queue waiting, the prefix's blocks shared.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "--mode", "chunked", "--num-prompts", "60", "--request-rate", "10",
       "--dataset-name", "random", "--random-input-len", "700", "--random-prefix-len", "160",
       "--random-output-len", "200", "--max-model-len", "4096", "--num-gpu-blocks-override", "420"]
VIEW = "step=219&req=14"
PICTURE = ROOT / "outputs" / "step-page.png"


def main() -> int:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium on PATH: apt-get install chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        page = Path(scratch) / "run.html"
        subprocess.run([sys.executable, str(ROOT / "code" / "main.py"), *RUN, "--html", str(page)],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={scratch}/profile", "--window-size=1300,1000",
                        f"--screenshot={PICTURE}", f"file://{page}#{VIEW}"],
                       check=True, capture_output=True)
    print(f"wrote {PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
