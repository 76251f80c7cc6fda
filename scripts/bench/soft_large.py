"""jaxkit.soft PAV sort / rank at n=10000, matched softness, vs softjax 0.1.1 (fwd+bwd).

The heavy-pooling cells of ``scripts/bench/soft.py`` (``--pav-large``) as their own bench,
lines named ``soft_large/...``, so that ``make report RUN=soft_large`` saves them in
``benchmarks/soft_large.jsonl`` beside the quick grid (a soft quick-grid re-save takes about
half an hour; these cells a few minutes). Same inputs, timing and targets as ``soft.py``:
PAV sort (matched) >= 3x and rank >= 2x softjax. Extra arguments pass through
(``--repeats``, ``--softjax-python``).
"""

import sys

import soft

if __name__ == "__main__":
    soft.BENCH = "soft_large"
    soft.main(["--pav-large", *sys.argv[1:]])
