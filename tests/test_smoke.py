import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_default_run_prints_four_modes():
    out = subprocess.run([sys.executable, str(ROOT / "code" / "main.py")], capture_output=True,
                         text=True, check=True).stdout
    for mode in ("NAIVE", "STATIC", "CONTINUOUS", "CONTINUOUS+CHUNKED"):
        assert f"\n{mode} " in out
