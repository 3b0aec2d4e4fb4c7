"""A kernel whose speed depends on the data: ``sqrt`` of zeros against ``sqrt`` of other floats.

AdamW divides by the square root of each parameter's second moment.  An embedding row of a
token no batch has held gets no gradient, so its second moment stays zero; on some CPUs a
vectorised square root of zero takes a slow path.  The roofline model prices an op by its
shapes and dtypes, never its values, so there such a step runs slower than predicted.  Times
``x.sqrt()`` of ``--rows`` × ``--width`` fp32 zeros, and of the same tensor uniform in (0, 1)
(the harness: warm-up, repeats to a time budget, median), and prints both and their ratio,
then one JSON line.  On the 2-core machine of README's bench figures, 96,000 floats (an
embedding of 1,000 tokens × 96): 777 µs of zeros against 36 µs, 22 times.
"""

from __future__ import annotations

import argparse
import json

import torch

from tensorledger.bench import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--width", type=int, default=96)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds for each tensor")
    args = parser.parse_args()
    zeros = torch.zeros(args.rows, args.width)
    others = torch.rand(args.rows, args.width, generator=torch.Generator().manual_seed(0))
    times = {name: measure(tensor.sqrt, budget_s=args.budget, name=f"sqrt of {name}").median_s
             for name, tensor in (("zeros", zeros), ("uniform (0, 1)", others))}
    ratio = times["zeros"] / times["uniform (0, 1)"]
    print(f"{torch.get_num_threads()} threads; sqrt of {args.rows} × {args.width} fp32:")
    for name, seconds in times.items():
        print(f"  {name:<16}{seconds * 1e6:10.1f} µs")
    print(f"  zeros take {ratio:.1f} times as long")
    print(json.dumps({"benchmark": "sqrt_of_zeros", "elements": args.rows * args.width,
                      "zeros_s": times["zeros"], "uniform_s": times["uniform (0, 1)"],
                      "ratio": ratio}))


if __name__ == "__main__":
    main()
