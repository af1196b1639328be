"""A tiny CPU training script: a small MLP fitting a fixed random regression target.

Used by the tests and examples of ``gpuprof run``; it knows nothing about gpuprof.
Arguments: ``--steps N`` (default 40), ``--exit-code C`` (exit with C after training),
``--hidden H`` (default 64), ``--report-rate FROM`` (print steps per wall second and per CPU
second measured from step FROM on, for benchmarks/run_overhead.py), ``--device D`` (default
cpu; ``cuda`` for the GPU check in tests/record/test_hooks_cuda.py).
"""

import argparse
import sys
import time

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--report-rate", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(256, 32).to(args.device)
    y = torch.randn(256, 1).to(args.device)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1)
    ).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    t_from = c_from = None
    for step in range(args.steps):
        if args.report_rate is not None and step == args.report_rate:
            t_from = time.perf_counter()
            c_from = time.process_time()
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    if t_from is not None and c_from is not None:
        n = args.steps - args.report_rate
        # Wall-clock rate, and the rate per CPU second of this process: the latter is what a
        # hook inside the process costs, without the noise of other load on shared CPUs.
        print(f"steps_per_s={n / (time.perf_counter() - t_from):.3f}")
        print(f"cpu_steps_per_s={n / (time.process_time() - c_from):.3f}")
    print(f"final loss {loss.item():.4f}")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
