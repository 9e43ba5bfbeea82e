"""What the Python drivers (driver.py, processes.py) report in common:
percentiles as bench/src/stats.rs computes them (nearest rank); keep them
in step. Standard library only, so processes.py can import it under
`python3 -I`."""

import math


def percentiles(samples):
    if not samples:
        return {"count": 0, "p50": 0, "p90": 0, "p99": 0, "p999": 0, "max": 0}
    samples.sort()
    n = len(samples)

    def rank(p):
        return samples[min(max(math.ceil(p * n), 1), n) - 1]

    return {"count": n, "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99), "p999": rank(0.999), "max": samples[-1]}


def ms(seconds):
    return seconds * 1000.0
