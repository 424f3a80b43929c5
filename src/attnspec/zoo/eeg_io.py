"""EEG files through MNE: write simulated recordings, read them (or BCI Competition IV 2a) back.

Writing (:func:`write_recording`): a :class:`~attnspec.zoo.eeg_sim.Recording` becomes an
``mne.io.RawArray`` with the 10-05 montage and one annotation per event whose description is the
event code as text (``"768"`` trial start, ``"769"``-``"772"`` cues), exactly as MNE presents the
events of the BCI IV 2a GDF files. Formats: ``.fif`` (MNE native, always available) and ``.edf``
(EDF+ through ``mne.export``; needs the ``edfio`` package). With ``bci2a_layout=True`` the file
mimics the 2a layout: channels labelled ``EEG-Fz, EEG-0, ..., EEG-C3, ...`` plus three EOG channels.

Reading (:func:`read_mi_epochs`): the loader a user points at a BCI IV 2a ``A01T.gdf`` — or at a
file written here — ``mne.io.read_raw`` (GDF/EDF/FIF by extension), EOG channels dropped, 2a
numbered labels renamed to 10-10 names, cue events taken from the annotations, epochs cut with
``mne.Epochs`` from ``tmin`` to ``tmax`` (seconds after the cue, ``tmax`` exclusive), optional
resampling. Returns :class:`MIEpochs` with ``X`` [trials, C, T] (volts, float32) and ``y`` [trials].
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .eeg_sim import BCI_IV_2A_CHANNELS, EVENT_ID, Recording

__all__ = ["MIEpochs", "write_recording", "read_mi_epochs", "BCI_IV_2A_FILE_LABELS"]

# channel labels as stored in the BCI IV 2a GDF files (22 EEG, then 3 EOG)
BCI_IV_2A_FILE_LABELS = ("EEG-Fz", "EEG-0", "EEG-1", "EEG-2", "EEG-3", "EEG-4", "EEG-5", "EEG-C3", "EEG-6",
                         "EEG-Cz", "EEG-7", "EEG-C4", "EEG-8", "EEG-9", "EEG-10", "EEG-11", "EEG-12",
                         "EEG-13", "EEG-14", "EEG-Pz", "EEG-15", "EEG-16")
_EOG_LABELS = ("EOG-left", "EOG-central", "EOG-right")


@dataclass
class MIEpochs:
    """Motor-imagery epochs read from a file (:func:`read_mi_epochs`).

    ``X`` [trials, C, T] volts (float32), ``y`` [trials] indexing ``classes``, ``event_samples`` the cue
    sample of each trial in the (possibly resampled) recording.

    Examples
    --------
    >>> import numpy as np
    >>> ep = MIEpochs(X=np.zeros((2, 3, 4), np.float32), y=np.array([0, 1]), ch_names=["C3", "Cz", "C4"],
    ...               sfreq=128.0, classes=("left_hand", "right_hand"), event_samples=np.array([100, 900]))
    >>> ep.X.shape, [ep.classes[k] for k in ep.y]
    ((2, 3, 4), ['left_hand', 'right_hand'])
    """

    X: np.ndarray          # [trials, C, T] volts, float32
    y: np.ndarray          # [trials] int64, index into ``classes``
    ch_names: list[str]
    sfreq: float
    classes: tuple[str, ...]
    event_samples: np.ndarray   # [trials] cue sample in the (possibly resampled) recording


def _to_raw(rec: Recording, bci2a_layout: bool = False, seed: int = 0):
    """``mne.io.RawArray`` with montage and event annotations (descriptions = event codes)."""
    import mne

    data, names, types = rec.data, list(rec.ch_names), ["eeg"] * len(rec.ch_names)
    if bci2a_layout:
        if tuple(rec.ch_names) != BCI_IV_2A_CHANNELS:
            raise ValueError("bci2a_layout needs the 22 BCI IV 2a channels")
        names = list(BCI_IV_2A_FILE_LABELS) + list(_EOG_LABELS)
        eog = 5e-6 * np.random.default_rng(seed).standard_normal((3, data.shape[1]))
        data = np.concatenate([data, eog])
        types += ["eog"] * 3
    info = mne.create_info(names, rec.sfreq, types)
    raw = mne.io.RawArray(data, info, verbose="error")
    if not bci2a_layout:
        from .eeg_sim import _montage_positions

        pos = _montage_positions()
        raw.set_montage(mne.channels.make_dig_montage({c: pos[c] for c in names}, coord_frame="head"))
    onsets = rec.events[:, 0] / rec.sfreq
    raw.set_annotations(mne.Annotations(onsets, np.zeros(len(onsets)), [str(c) for c in rec.events[:, 2]]))
    return raw


def write_recording(rec: Recording, path, bci2a_layout: bool = False, overwrite: bool = True) -> Path:
    """Write ``rec`` to ``path`` (``.fif`` or ``.edf``, chosen by the extension).

    The cues become annotations whose descriptions are the event codes; ``bci2a_layout`` renames the 22
    channels as in the BCI IV 2a files and adds three EOG channels.

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> from attnspec.zoo.eeg_sim import SimConfig, simulate_recordings
    >>> rec = simulate_recordings(SimConfig(n_subjects=1, trials_per_class=2, channels=("C3", "Cz", "C4")))[0]
    >>> tmp = tempfile.mkdtemp()
    >>> write_recording(rec, pathlib.Path(tmp, "sim_raw.fif")).name
    'sim_raw.fif'
    >>> write_recording(rec, pathlib.Path(tmp, "sim.txt"))
    Traceback (most recent call last):
    ValueError: unsupported extension '.txt'; use .fif or .edf
    >>> shutil.rmtree(tmp)
    """
    import mne

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = _to_raw(rec, bci2a_layout=bci2a_layout)
    if path.suffix == ".fif" or path.name.endswith(".fif.gz"):
        raw.save(path, overwrite=overwrite, verbose="error")
    elif path.suffix == ".edf":
        mne.export.export_raw(path, raw, fmt="edf", overwrite=overwrite, verbose="error")
    else:
        raise ValueError(f"unsupported extension {path.suffix!r}; use .fif or .edf")
    return path


def _rename_2a(raw) -> None:
    names = [c for c in raw.ch_names]
    if len(names) == 22 and tuple(names) == BCI_IV_2A_FILE_LABELS:
        raw.rename_channels(dict(zip(BCI_IV_2A_FILE_LABELS, BCI_IV_2A_CHANNELS)))
    else:
        raw.rename_channels({c: c[4:] for c in names if c.startswith("EEG-")})


def read_mi_epochs(path, tmin: float = 0.5, tmax: float = 2.5,
                   classes: tuple[str, ...] = ("left_hand", "right_hand"),
                   resample: float | None = None) -> MIEpochs:
    """Read a motor-imagery recording (BCI IV 2a GDF, or EDF/FIF written here) into epochs.

    EOG channels are dropped, BCI IV 2a labels renamed to 10-20 names, the recording resampled to
    ``resample`` Hz if given, and ``[tmin, tmax)`` seconds after each cue of ``classes`` cut.

    Examples
    --------
    A recording written by :func:`write_recording`, read back at half its sampling rate:

    >>> import pathlib, shutil, tempfile
    >>> from attnspec.zoo import eeg_sim
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> sim = eeg_sim.SimConfig(n_subjects=1, trials_per_class=2, channels=("C3", "Cz", "C4"))
    >>> path = write_recording(eeg_sim.simulate_recordings(sim)[0], folder / "sim_raw.fif")
    >>> ep = read_mi_epochs(path, tmin=0.5, tmax=2.5, resample=64.0)
    >>> ep.X.shape, ep.ch_names, ep.sfreq, sorted(ep.y.tolist())
    ((4, 3, 128), ['C3', 'Cz', 'C4'], 64.0, [0, 0, 1, 1])
    >>> shutil.rmtree(folder)
    """
    import mne

    try:
        raw = mne.io.read_raw(str(path), preload=True, verbose="error")
    except Exception as err:             # mne raises many kinds for a damaged, empty or foreign file
        raise ValueError(f"{path}: cannot be read as an EEG recording ({type(err).__name__}: {err})") from None
    eog = [c for c, t in zip(raw.ch_names, raw.get_channel_types()) if t == "eog" or c.startswith("EOG")]
    raw.drop_channels(eog)
    _rename_2a(raw)
    raw.pick("all")
    if resample is not None and abs(resample - raw.info["sfreq"]) > 1e-9:
        raw.resample(resample, verbose="error")
    sfreq = raw.info["sfreq"]
    wanted = {str(EVENT_ID[c]): EVENT_ID[c] for c in classes}
    events, _ = mne.events_from_annotations(raw, event_id=wanted, verbose="error")
    code_to_y = {EVENT_ID[c]: i for i, c in enumerate(classes)}
    n_t = int(round((tmax - tmin) * sfreq))
    ep = mne.Epochs(raw, events, event_id={c: EVENT_ID[c] for c in classes}, tmin=tmin,
                    tmax=tmin + (n_t - 1) / sfreq, baseline=None, preload=True, picks="eeg",
                    reject_by_annotation=False, verbose="error")
    X = ep.get_data(copy=False).astype(np.float32)
    y = np.array([code_to_y[c] for c in ep.events[:, 2]], dtype=np.int64)
    return MIEpochs(X=X, y=y, ch_names=list(ep.ch_names), sfreq=float(sfreq), classes=tuple(classes),
                    event_samples=ep.events[:, 0].copy())
