"""Interleaved A/B runs of a benchmark: this checkout against another one.

    .venv/bin/python -m bench.ab --base /path/to/other/checkout [--pairs 3]
                                 [--grep 'turns/s|p99'] -- bench.turns --parts tput

This VM's speed drifts by up to 2x over minutes, so two versions are compared
in pairs run back to back, never as two blocks, and which side runs first
alternates from pair to pair (base, new, new, base, ...): a run is slower for
following another one, so a fixed order favours the side that goes first. Each
run is `<checkout>/.venv/bin/python -m <module> <args>` with the checkout as its
working directory, so each side runs its own code with its own environment.
Lines of the benchmark's output that match `--grep` are printed per run, and
for every number on them, the median per side. `--base-args` and `--new-args`
add arguments to one side's command, so with `--base .` one checkout is
compared with itself under two settings (metrics off and on, say); `--base-env` and
`--new-env` (NAME=VALUE, repeatable) do the same with the environment (the SQLite
driver, say: BROKER_SQLITE_DRIVER=stdlib).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

NUMBER = re.compile(r"-?\d[\d,]*\.?\d*")


def run(checkout: Path, command: list[str], env: dict[str, str] | None = None) -> list[str]:
    python = checkout / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", *command],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        sys.exit(f"{checkout}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done.stdout.splitlines()


def numbers(line: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(line)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--base", type=Path, required=True, help="the other checkout")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--grep", default=".", help="regex: the output lines to compare")
    parser.add_argument("--base-args", default="", help="arguments added on the base side")
    parser.add_argument("--new-args", default="", help="arguments added on the new side")
    parser.add_argument("--base-env", action="append", default=[], help="NAME=VALUE, base side")
    parser.add_argument("--new-env", action="append", default=[], help="NAME=VALUE, new side")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- module and its args")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the benchmark module after --")
    pattern = re.compile(args.grep)
    sides = {"base": args.base.resolve(), "new": Path.cwd()}
    picked: dict[str, list[list[str]]] = {side: [] for side in sides}
    for pair in range(1, args.pairs + 1):
        # Which side runs first alternates: a run pays for the one before it
        # (docs/performance.md, "How to reproduce").
        order = list(sides.items()) if pair % 2 else list(sides.items())[::-1]
        for side, checkout in order:
            extra = (args.base_args if side == "base" else args.new_args).split()
            pairs_env = args.base_env if side == "base" else args.new_env
            env = dict(item.split("=", 1) for item in pairs_env)
            lines = [line for line in run(checkout, command + extra, env) if pattern.search(line)]
            picked[side].append(lines)
            print(f"pair {pair} {side}:")
            for line in lines:
                print(f"    {line.strip()}")
            sys.stdout.flush()
    print("medians (base -> new), line by line:")
    for index, line in enumerate(picked["new"][0]):
        label = NUMBER.sub("#", line.strip())
        columns: list[list[float]] = []
        for side in sides:
            runs = [numbers(lines[index]) for lines in picked[side] if index < len(lines)]
            if not runs:  # a line one side prints and the other does not
                columns.append([])
                continue
            width = min(len(r) for r in runs)
            columns.append([statistics.median(r[i] for r in runs) for i in range(width)])
        pairs = ", ".join(f"{b:g} -> {n:g}" for b, n in zip(*columns, strict=False))
        print(f"    {label}: {pairs}")


if __name__ == "__main__":
    main()
