"""Test-wide settings for the suite and the docstring examples: offline model hubs, no display, one torch thread
(two threads on a busy 2-core CI box run several times slower)."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # torch is only needed by the model tests
    pass

#: Scripts beside test data (e.g. the zoo fixture generator) are run by hand, not collected.
collect_ignore_glob = ["tests/data/*"]
