"""Two processes loading a packaged GGUF model for the first time convert it once, one after the other, and both
load it: the conversion holds a lock between processes (attnspec.models.loading._exclusive). Before it, a second
`attnspec diagnose --model qwen2.5-0.5b` started while the first converted failed with 'Unable to load vocabulary
from file' (the first deleted the GGUF file the second was reading)."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("gguf")

CHILD = ("from attnspec.models import load_model; m, tok = load_model('smollm2-135m', verbose=True); "
         "print(type(m).__name__, tok('a b')['input_ids'][:1])")


@pytest.mark.slow
def test_two_first_loads_at_once_both_succeed(tmp_path):
    env = {**os.environ, "ATTNSPEC_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert "LlamaForCausalLM" in out, out
    assert sum("converted" in out for out, _ in outs) == 1, outs            # once, by whichever came first
    converted = [d for d in (tmp_path / "cache").iterdir() if d.is_dir() and d.name.endswith("-f32")]
    assert len(converted) == 1 and (converted[0] / "config.json").is_file()
