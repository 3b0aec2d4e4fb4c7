"""Mutation score per package from mutmut's results in mutants/ (after `make mutation`).

    python scripts/mutation_score.py

One row per package of ``src/tensorledger``: mutants checked, killed (a failing test or a
type-check catch), timed out, survived, without tests, and the share killed; the packages under
90% are named.  A timeout is not counted as a kill: a mutant's forked worker can wait rather
than compute (a fork keeps one thread of an OpenMP team; and three surviving mutants of
``attention_rate`` hung about 270 s each under mutmut's default ``timeout_multiplier``), so a
timeout is shown apart, to be checked by hand (``mutmut show``, then its tests run alone).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KILLED = {1, 3, 37}  # a failing test (or pytest's internal error), a type-check catch
TIMEOUT = {36, 24, -24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def scores(mutants: Path = ROOT / "mutants") -> dict[str, Counter[str]]:
    by_package: dict[str, Counter[str]] = defaultdict(Counter)
    for meta in sorted(mutants.glob("src/tensorledger/**/*.py.meta")):
        package = meta.relative_to(mutants / "src" / "tensorledger").parts[0]
        for code in json.loads(meta.read_text())["exit_code_by_key"].values():
            if code is None or code == 34:  # not checked, skipped
                continue
            kind = ("killed" if code in KILLED else "timeout" if code in TIMEOUT
                    else "survived" if code in SURVIVED
                    else "no tests" if code in NO_TESTS else "suspicious")
            by_package[package][kind] += 1
    return by_package


def main() -> None:
    rows = scores()
    if not rows:
        raise SystemExit("no results in mutants/: run `make mutation` first")
    print(f"{'package':<10} {'checked':>8} {'killed':>7} {'timeout':>8} {'survived':>9} "
          f"{'no tests':>9} {'suspicious':>11} {'killed %':>9}")
    low = []
    for package, n in sorted(rows.items()):
        checked = sum(n.values())
        share = 100 * n["killed"] / checked
        print(f"{package:<10} {checked:>8} {n['killed']:>7} {n['timeout']:>8} "
              f"{n['survived']:>9} {n['no tests']:>9} {n['suspicious']:>11} {share:>8.1f}%")
        if share < 90:
            low.append(package)
    if low:
        print("under 90%: " + ", ".join(low))


if __name__ == "__main__":
    main()
