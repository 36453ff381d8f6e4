#!/usr/bin/env python3
"""Regenerate the agent-session corpus: benches/corpus/<kind>/<NN>-<slug>.jsonl.

The generated files are what is committed and replayed (benches/learn_corpus.rs); this script
only saves typing. Deterministic: each session has its own seeded RNG (seeded by its name).
Usage: python3 benches/corpus/generate.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gen_go  # noqa: E402
import gen_node  # noqa: E402
import gen_python  # noqa: E402
import gen_rust  # noqa: E402


def main():
    total = 0
    for kind, mod in [("python", gen_python), ("node", gen_node), ("rust", gen_rust), ("go", gen_go)]:
        out = os.path.join(HERE, kind)
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(out):
            if f.endswith(".jsonl"):
                os.remove(os.path.join(out, f))
        counts = {False: 0, True: 0}
        for make in mod.SESSIONS:
            s = make()
            n = s.dump(os.path.join(out, s.name.split("-", 1)[1] + ".jsonl"))
            counts[s.held_out] += n
            print(f"{s.name:28} {n:4} {'held out' if s.held_out else ''}")
        print(f"{kind}: {counts[False]} train + {counts[True]} held out = {sum(counts.values())}\n")
        total += sum(counts.values())
    print(f"total {total}")


if __name__ == "__main__":
    main()
