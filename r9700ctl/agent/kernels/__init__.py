"""Measurement kernels: pure functions taking plain arguments, returning JSON-serialisable dicts.

They import torch and nothing of the agent's framework, so each runs alone (bench/, tests) or
in a child process of the watchdog (checks/). One module per measurement: hostbw, p2p, memory,
gemm (+ sampler), collective, scaling (+ tpstep), stability; timing and buffers hold the shared
discipline (warm-up apart, refill outside the timed region, events, median of windows).
"""
