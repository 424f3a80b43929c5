"""Threads and memory of a diagnosis: a thread pool over layers with single-threaded torch, one BLAS
thread for numpy, and handing freed heap pages back to the OS."""
from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import torch

__all__: list[str] = []   # helpers of the diagnosis steps only


@contextlib.contextmanager
def _layer_pool(n: int):
    """``n`` worker threads over the layers of a batch, each running torch single-threaded (LAPACK and
    torch release the GIL). Results are consumed in layer order: nothing depends on the thread count."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
            yield pool
    finally:
        torch.set_num_threads(old)


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``): the per-batch temporaries of many
    sizes otherwise leave the resident size growing with the corpus. No-op elsewhere."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            import ctypes
            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None


def _one_blas_thread():
    """numpy's OpenBLAS with several threads is 10x slower on the small batched eigenproblems used here."""
    try:
        from threadpoolctl import ThreadpoolController
        return ThreadpoolController().select(internal_api="openblas").limit(limits=1)
    except Exception:  # threadpoolctl missing or no OpenBLAS: nothing to limit
        return contextlib.nullcontext()


