"""How rules for setting aside disturbed recordings change diff's error rates, on recordings
already made by bench_diff_errors.py (issue 19).

Reads each recording's value (its lower-quartile steady step, stats.recording_value) from a
`bench_diff_errors.py --runs K --out DIR`
folder, then, for each rule, (1) judges the benchmark's own comparisons again and (2) resamples:
draws n recordings per side at random from all of a group's recordings of that side (on a quiet
machine the pairs are exchangeable), many times, and counts "slower" verdicts. The verdict is
diff's own rule on the kept recordings' values (Student's t, pooled variance; "slower" needs
p < 0.05 and the whole 95% interval past the 5% floor, docs/COMPARE.md).

    python bench/diff_rules_resample.py --out /tmp/w19/alt5 [--draws 2000] [--n 5 7 10]

Not a test: the rates are measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuron_explorer.analyzers.diff import ALPHA, MIN_SHARE_OF_STEP, compare  # noqa: E402
from neuron_explorer.analyzers.stats import run_level_t  # noqa: E402


def medians(out: Path) -> dict[str, dict[str, list[float]]]:
    """{'same-0': {'base': [ms, ...], 'test': [...]}, ...} from the folders the benchmark wrote."""
    found = {}
    for base in sorted(out.glob("*-base")):
        key = base.name[: -len("-base")]
        s = compare(base, out / f"{key}-test", detect_pct=5).step_time
        found[key] = {role: [r["value_ns"] / 1e6 for r in s.runs[role]] for role in ("base", "test")}
    return found


def slower(base: list[float], test: list[float]) -> bool:
    if len(base) + len(test) < 3:
        return False
    rl = run_level_t(base, test)
    floor = MIN_SHARE_OF_STEP * sum(base) / len(base)
    return rl.p_value < ALPHA and rl.delta >= floor and rl.ci_low >= floor


def within(share: float | None, min_kept: int = 1):
    """Keep the recordings within `share` of the side's fastest (None: keep all); a side of one or
    two recordings keeps them all; at least `min_kept` (the fastest) are kept."""
    def keep(values: list[float]) -> list[float]:
        if share is None or len(values) < 3:
            return values
        kept = [v for v in values if v <= (1 + share) * min(values)]
        return kept if len(kept) >= min_kept else sorted(values)[:min_kept]
    return keep


def first_gap(values: list[float], gap: float = 0.08) -> list[float]:
    """The rule of 005b0ab: sorted, drop those above the first gap of more than 8% of the fastest
    between neighbours, the two fastest always kept."""
    s = sorted(values)
    if len(s) < 3:
        return values
    for k in range(2, len(s)):
        if s[k] - s[k - 1] > gap * s[0]:
            return s[:k]
    return s


RULES = {"every recording kept": within(None), "first gap of 8%, two fastest kept": first_gap,
         **{f"within {p}% of the fastest": within(p / 100) for p in (4, 6, 8, 10, 12, 15)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a bench_diff_errors.py --runs K output folder")
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--n", type=int, nargs="+", default=[5, 7, 10], help="recordings per side to resample")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    data = medians(args.out)
    groups = {g: sorted(k for k in data if k.startswith(g + "-")) for g in ("same", "planted")}
    print(f"{len(data)} comparisons in {args.out}; {args.draws} draws per cell")
    for name, keep in RULES.items():
        judged = {g: sum(slower(keep(data[k]["base"]), keep(data[k]["test"])) for k in keys) for g, keys in groups.items()}
        line = [f"{name:34s} as recorded: same {judged['same']}/{len(groups['same'])}, "
                f"planted {judged['planted']}/{len(groups['planted'])} |"]
        rng = random.Random(args.seed)
        for g, keys in groups.items():
            pool = {role: [v for k in keys for v in data[k][role]] for role in ("base", "test")}
            rates = []
            for n in args.n:
                hits = sum(slower(keep(rng.sample(pool["base"], n)), keep(rng.sample(pool["test"], n)))
                           for _ in range(args.draws))
                rates.append(f"n={n} {100 * hits / args.draws:.1f}%")
            line.append(f"{g} slower: {', '.join(rates)}")
        print(" ".join(line), flush=True)
    (args.out / "medians.json").write_text(json.dumps(data))


if __name__ == "__main__":
    main()
