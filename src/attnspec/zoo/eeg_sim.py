"""Simulated motor-imagery EEG, deterministic by seed.

Model of one subject's continuous recording (all amplitudes in microvolts, stored in volts)::

    x_c(t) = g_c * [ b_c(t) + sum_s a_s(c) * e_s(t) * r_s(t) ] + n_c(t) + line_c(t)

* channels c: a 10-10 montage, by default the 22 EEG channels of BCI Competition IV 2a (Fz ... POz)
  with positions from MNE's 10-05 template montage (``colin27_1005``, formerly ``standard_1005``);
* b_c: 1/f^chi background (aperiodic exponent chi per subject), spatially correlated across
  electrodes (exponential kernel on electrode distance), RMS ``background_uv``;
* sources s: sensorimotor generators under C3 (right hand), C4 (left hand), Cz (feet), C5/C6
  (tongue) and an occipital alpha generator under POz (task-unrelated); each projects to the channels
  with a Gaussian spatial pattern a_s(c) = exp(-|p_c - p_s|^2 / 2 w^2) (w = ``Sensors.source_width_m``);
* r_s: the source's rhythm, a mu/alpha component (narrow band around the subject's mu peak,
  8-13 Hz) plus a beta component (around the subject's beta peak, 13-30 Hz), each a band-limited
  Gaussian process;
* e_s: event-related desynchronization (ERD) envelope, 1 at rest, dropping by the trial's depth
  during imagery with a raised-cosine onset (trial-dependent latency) and offset. Left hand -> C4
  source (contralateral), right hand -> C3, feet -> Cz, tongue -> C5/C6; the ipsilateral hand source
  desynchronizes by ``ipsi_fraction`` of the depth; beta desynchronizes by ``beta_erd_ratio`` of mu.
* n_c: white sensor noise; line_c: 50 Hz line noise (when the sampling rate allows).

Variability: per subject (mu and beta peak frequencies, aperiodic exponent, rhythm amplitude,
ERD strength, source position jitter, channel gains) and per trial (ERD depth, ERD latency,
rhythm amplitude). Trial timing follows BCI IV 2a: fixation, cue (event codes 769-772 for left
hand, right hand, feet, tongue; 768 = trial start), imagery, random rest.

Shapes: a :class:`Recording` holds ``data`` [C, N] (volts) and ``events`` [n, 3] (sample, 0, code)
in MNE convention; :func:`make_dataset` cuts epochs ``X`` [trials, C, T] (volts, float32) and labels
``y`` [trials] (0..n_classes-1 in the order of ``SimConfig.classes``).
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["BCI_IV_2A_CHANNELS", "EVENT_ID", "TRIAL_START", "SimConfig", "Sensors", "Recording", "simulate_recordings",
           "epochs_from_recording", "make_dataset", "bandpower"]

BCI_IV_2A_CHANNELS = ("Fz", "FC3", "FC1", "FCz", "FC2", "FC4", "C5", "C3", "C1", "Cz", "C2", "C4", "C6",
                      "CP3", "CP1", "CPz", "CP2", "CP4", "P1", "Pz", "P2", "POz")
EVENT_ID = {"left_hand": 769, "right_hand": 770, "feet": 771, "tongue": 772}  # BCI IV 2a GDF codes
TRIAL_START = 768

# class -> {source: weight of the ERD depth}
_ERD_MAP = {
    "left_hand": {"C4": 1.0, "C3": None},      # None: ipsilateral fraction
    "right_hand": {"C3": 1.0, "C4": None},
    "feet": {"Cz": 1.0},
    "tongue": {"C5": 1.0, "C6": 1.0},
}
_SOURCES = ("C3", "C4", "Cz", "C5", "C6", "POz")


@dataclass(frozen=True)
class Sensors:
    """How the sources reach the electrodes: volume conduction and sensor noise.

    A source at ``p_s`` (jittered per subject by ``source_jitter_m`` metres, standard deviation per
    coordinate) projects to channel ``c`` with weight ``exp(-|p_c - p_s|^2 / 2 source_width_m^2)``;
    each channel has a gain ``1 + gain_sd * N(0, 1)``, white noise of RMS ``noise_uv`` and 50 Hz line
    noise of amplitude ``line_noise_uv`` (microvolts).

    Examples
    --------
    >>> SimConfig(sensors=Sensors(noise_uv=0.5)).sensors.noise_uv
    0.5
    >>> SimConfig.from_dict({"sensor_noise_uv": 0.5}).sensors     # an earlier checkpoint's flat form
    Sensors(source_width_m=0.03, source_jitter_m=0.005, gain_sd=0.1, noise_uv=0.5, line_noise_uv=1.0)
    """

    source_width_m: float = 0.03
    source_jitter_m: float = 0.005
    gain_sd: float = 0.1
    noise_uv: float = 2.0
    line_noise_uv: float = 1.0


_FLAT_SENSOR_KEYS = {"source_width_m": "source_width_m", "source_jitter_m": "source_jitter_m", "gain_sd": "gain_sd",
                     "sensor_noise_uv": "noise_uv", "line_noise_uv": "line_noise_uv"}


@dataclass(frozen=True)
class SimConfig:
    """All knobs of the generator (defaults: 2 subjects, left vs right hand, 128 Hz).

    Amplitudes are in microvolts, durations in seconds, distances in metres; ``erd_depth`` is the mean
    fractional amplitude drop of the contralateral mu rhythm during imagery; ``sensors`` groups volume
    conduction and sensor noise (:class:`Sensors`). ``to_dict``/``from_dict`` give the JSON form a
    checkpoint stores.

    Examples
    --------
    >>> cfg = SimConfig(n_subjects=1, trials_per_class=2, channels=("C3", "Cz", "C4"), seed=3)
    >>> SimConfig.from_dict(cfg.to_dict()) == cfg
    True
    >>> cfg.to_dict()["channels"]
    ['C3', 'Cz', 'C4']
    """

    n_subjects: int = 2
    trials_per_class: int = 40
    classes: tuple[str, ...] = ("left_hand", "right_hand")
    sfreq: float = 128.0
    channels: tuple[str, ...] = BCI_IV_2A_CHANNELS
    fixation_s: float = 2.0
    imagery_s: float = 4.0
    rest_s: tuple[float, float] = (1.5, 2.5)
    background_uv: float = 8.0
    background_length_m: float = 0.04
    aperiodic_exponent: tuple[float, float] = (0.8, 1.6)   # per-subject range
    mu_uv: float = 8.0
    beta_uv: float = 3.0
    mu_peak_hz: tuple[float, float] = (9.0, 12.0)
    beta_peak_hz: tuple[float, float] = (16.0, 24.0)
    erd_depth: float = 0.6            # mean fractional amplitude reduction (0.6 -> 84% power drop)
    erd_depth_sd: float = 0.12        # trial-to-trial
    subject_erd_sd: float = 0.1       # subject-to-subject multiplicative spread
    ipsi_fraction: float = 0.2
    beta_erd_ratio: float = 0.7
    erd_latency_s: tuple[float, float] = (0.2, 0.7)
    sensors: Sensors = Sensors()
    seed: int = 0

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "SimConfig":
        """Inverse of :meth:`to_dict`; also reads the flat form of earlier checkpoints (sensor fields
        at the top level, ``sensor_noise_uv`` for ``noise_uv``)."""
        d = dict(d)
        sensors = dict(d.pop("sensors", {}))
        for old, new in _FLAT_SENSOR_KEYS.items():
            if old in d:
                sensors[new] = d.pop(old)
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}, sensors=Sensors(**sensors))


@dataclass
class Recording:
    """One subject's continuous simulated recording.

    ``data`` [C, N] volts at ``sfreq``; ``events`` [n, 3] (sample, 0, code) as MNE writes them, the cue
    codes in ``event_id`` (BCI IV 2a: 769 left hand, 770 right hand, 771 feet, 772 tongue);
    ``cue_events`` keeps the cues only.

    Examples
    --------
    >>> rec = simulate_recordings(SimConfig(n_subjects=1, trials_per_class=2, channels=("C3", "Cz", "C4")))[0]
    >>> rec.data.shape[0], rec.sfreq, rec.ch_names
    (3, 128.0, ['C3', 'Cz', 'C4'])
    >>> rec.cue_events[:, 2].tolist(), rec.event_id
    ([..., ..., ..., ...], {'left_hand': 769, 'right_hand': 770})
    """

    data: np.ndarray                 # [C, N] volts
    sfreq: float
    ch_names: list[str]
    events: np.ndarray               # [n, 3] int: sample, 0, code (cues and trial starts)
    event_id: dict[str, int]
    subject: int
    params: dict = field(default_factory=dict)

    @property
    def cue_events(self) -> np.ndarray:
        codes = set(self.event_id.values())
        return self.events[np.isin(self.events[:, 2], list(codes))]


@functools.lru_cache(maxsize=1)
def _montage_positions() -> dict:
    import mne

    name = "colin27_1005" if "colin27_1005" in mne.channels.get_builtin_montages() else "standard_1005"
    return mne.channels.make_standard_montage(name).get_positions()["ch_pos"]


def _channel_positions(ch_names) -> np.ndarray:
    """[C, 3] positions in metres (MNE's 10-05 template montage, head frame)."""
    pos = _montage_positions()
    return np.array([pos[c] for c in ch_names], dtype=float)


def _colored(rng, n_series: int, n: int, sfreq: float, shape_fn) -> np.ndarray:
    """Gaussian processes [n_series, n] with amplitude spectrum shape_fn(freqs), unit RMS."""
    spec = np.fft.rfft(rng.standard_normal((n_series, n)), axis=-1)
    f = np.fft.rfftfreq(n, 1.0 / sfreq)
    x = np.fft.irfft(spec * shape_fn(f), n=n, axis=-1)
    return x / (x.std(axis=-1, keepdims=True) + 1e-12)


def _narrowband(rng, n_series: int, n: int, sfreq: float, f0: float, bw: float = 1.0) -> np.ndarray:
    """Band-limited Gaussian processes [n_series, n] with a Gaussian spectral peak at f0 (sd bw Hz)."""
    return _colored(rng, n_series, n, sfreq, lambda f: np.exp(-0.5 * ((f - f0) / bw) ** 2))


def _ramp(t: np.ndarray, width: float) -> np.ndarray:
    """Raised cosine from 0 (t <= 0) to 1 (t >= width)."""
    u = np.clip(t / width, 0.0, 1.0)
    return 0.5 - 0.5 * np.cos(np.pi * u)


def _simulate_subject(cfg: SimConfig, subject: int, rng: np.random.Generator, pos: np.ndarray) -> Recording:
    sf = cfg.sfreq
    C = len(cfg.channels)
    # --- subject-level parameters
    mu_f = rng.uniform(*cfg.mu_peak_hz)
    beta_f = rng.uniform(*cfg.beta_peak_hz)
    chi = rng.uniform(*cfg.aperiodic_exponent)
    rhythm_scale = float(np.exp(rng.normal(0.0, 0.2)))
    erd_scale = float(np.clip(np.exp(rng.normal(0.0, cfg.subject_erd_sd)), 0.5, 1.5))
    gains = 1.0 + cfg.sensors.gain_sd * rng.standard_normal(C)
    src_pos = {}
    all_pos = _channel_positions(sorted(set(_SOURCES)))
    for s, p in zip(sorted(set(_SOURCES)), all_pos):
        src_pos[s] = p + cfg.sensors.source_jitter_m * rng.standard_normal(3)
    # --- trial sequence
    labels = np.repeat(np.arange(len(cfg.classes)), cfg.trials_per_class)
    labels = rng.permutation(labels)
    n_tr = len(labels)
    rests = rng.uniform(*cfg.rest_s, size=n_tr)
    trial_len = cfg.fixation_s + cfg.imagery_s
    starts_s = np.concatenate([[1.0], 1.0 + np.cumsum(trial_len + rests)[:-1]])
    total_s = starts_s[-1] + trial_len + rests[-1]
    N = int(np.ceil(total_s * sf))
    t = np.arange(N) / sf
    cues_s = starts_s + cfg.fixation_s
    # --- background: spatially correlated 1/f noise
    f_floor = 0.5
    bg = _colored(rng, C, N, sf, lambda f: np.maximum(f, f_floor) ** (-chi / 2.0))
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    K = np.exp(-d / cfg.background_length_m)
    w, U = np.linalg.eigh(K)
    mix = (U * np.sqrt(np.clip(w, 0, None))) @ U.T
    mix /= np.linalg.norm(mix, axis=1, keepdims=True)
    bg = mix @ bg * cfg.background_uv
    # --- sources: rhythms and ERD envelopes
    srcs = list(_SOURCES)
    S = len(srcs)
    mu = _narrowband(rng, S, N, sf, mu_f, bw=0.8)
    beta = _narrowband(rng, S, N, sf, beta_f, bw=2.0)
    env_mu = np.ones((S, N))
    env_beta = np.ones((S, N))
    depths = np.clip(cfg.erd_depth * erd_scale + cfg.erd_depth_sd * rng.standard_normal(n_tr), 0.0, 0.95)
    latencies = rng.uniform(*cfg.erd_latency_s, size=n_tr)
    trial_amp = np.exp(0.15 * rng.standard_normal((n_tr, S)))
    for i, (lab, cue) in enumerate(zip(labels, cues_s)):
        a, b = int(cue * sf) - int(0.5 * sf), min(N, int((cue + cfg.imagery_s + 1.5) * sf))
        tt = t[a:b] - cue
        shape = _ramp(tt - latencies[i], 0.5) * (1.0 - _ramp(tt - cfg.imagery_s, 0.5))
        for s_name, wgt in _ERD_MAP[cfg.classes[lab]].items():
            wgt = cfg.ipsi_fraction if wgt is None else wgt
            j = srcs.index(s_name)
            env_mu[j, a:b] *= 1.0 - depths[i] * wgt * shape
            env_beta[j, a:b] *= 1.0 - cfg.beta_erd_ratio * depths[i] * wgt * shape
        # trial-to-trial rhythm amplitude over the whole trial
        a2, b2 = int(starts_s[i] * sf), min(N, int((cue + cfg.imagery_s + rests[i]) * sf))
        env_mu[:, a2:b2] *= trial_amp[i][:, None]
        env_beta[:, a2:b2] *= trial_amp[i][:, None]
    rhythm = rhythm_scale * (cfg.mu_uv * env_mu * mu + cfg.beta_uv * env_beta * beta)   # [S, N]
    sp = np.stack([src_pos[s] for s in srcs])
    patt = np.exp(-np.sum((pos[:, None] - sp[None]) ** 2, axis=-1) / (2 * cfg.sensors.source_width_m ** 2))  # [C, S]
    signal = bg + patt @ rhythm
    signal *= gains[:, None]
    signal += cfg.sensors.noise_uv * rng.standard_normal((C, N))
    if sf > 110 and cfg.sensors.line_noise_uv > 0:
        signal += cfg.sensors.line_noise_uv * np.sin(2 * np.pi * 50.0 * t[None] + rng.uniform(0, 2 * np.pi, (C, 1)))
    event_id = {c: EVENT_ID[c] for c in cfg.classes}
    codes = np.array([EVENT_ID[cfg.classes[lab]] for lab in labels])
    ev_cue = np.stack([np.round(cues_s * sf).astype(int), np.zeros(n_tr, int), codes], axis=1)
    ev_start = np.stack([np.round(starts_s * sf).astype(int), np.zeros(n_tr, int),
                         np.full(n_tr, TRIAL_START)], axis=1)
    events = np.concatenate([ev_start, ev_cue])
    events = events[np.argsort(events[:, 0], kind="stable")]
    params = dict(mu_hz=mu_f, beta_hz=beta_f, aperiodic_exponent=chi, rhythm_scale=rhythm_scale,
                  erd_scale=erd_scale, labels=labels.tolist())
    return Recording(data=signal * 1e-6, sfreq=sf, ch_names=list(cfg.channels), events=events,
                     event_id=event_id, subject=subject, params=params)


def simulate_recordings(cfg: SimConfig = SimConfig()) -> list[Recording]:
    """One :class:`Recording` per subject; identical for identical ``cfg`` (including ``seed``).

    Each subject draws its own generator from ``SeedSequence(cfg.seed).spawn(n_subjects)``.

    Examples
    --------
    >>> import numpy as np
    >>> cfg = SimConfig(n_subjects=1, trials_per_class=2, channels=("C3", "Cz", "C4"))
    >>> a, b = simulate_recordings(cfg)[0], simulate_recordings(cfg)[0]
    >>> bool(np.array_equal(a.data, b.data)), len(a.cue_events)
    (True, 4)
    >>> simulate_recordings(SimConfig(classes=("left_hand", "jaw")))
    Traceback (most recent call last):
    ValueError: unknown classes ['jaw']; choose from ['feet', 'left_hand', 'right_hand', 'tongue']
    """
    unknown = set(cfg.classes) - set(EVENT_ID)
    if unknown:
        raise ValueError(f"unknown classes {sorted(unknown)}; choose from {sorted(EVENT_ID)}")
    pos = _channel_positions(cfg.channels)
    seqs = np.random.SeedSequence(cfg.seed).spawn(cfg.n_subjects)
    return [_simulate_subject(cfg, i, np.random.default_rng(s), pos) for i, s in enumerate(seqs)]


def epochs_from_recording(rec: Recording, tmin: float = 0.5, tmax: float = 2.5,
                          classes: tuple[str, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cut [tmin, tmax) seconds after each cue: X [n, C, T] float32 (volts), y [n] int.

    ``y`` indexes ``classes`` (default: the recording's ``event_id`` order).

    Examples
    --------
    >>> rec = simulate_recordings(SimConfig(n_subjects=1, trials_per_class=2, channels=("C3", "Cz", "C4")))[0]
    >>> X, y = epochs_from_recording(rec, tmin=0.5, tmax=2.5)
    >>> X.shape, X.dtype, sorted(y.tolist())
    ((4, 3, 256), dtype('float32'), [0, 0, 1, 1])
    """
    classes = classes or tuple(rec.event_id)
    code_to_y = {rec.event_id[c]: i for i, c in enumerate(classes)}
    ev = rec.events[np.isin(rec.events[:, 2], list(code_to_y))]
    a, T = int(round(tmin * rec.sfreq)), int(round((tmax - tmin) * rec.sfreq))
    idx = ev[:, 0, None] + a + np.arange(T)[None]
    X = rec.data[:, idx].transpose(1, 0, 2).astype(np.float32)
    y = np.array([code_to_y[c] for c in ev[:, 2]], dtype=np.int64)
    return X, y


def make_dataset(cfg: SimConfig = SimConfig(), tmin: float = 0.5, tmax: float = 2.5):
    """Simulate and cut epochs of all subjects: X [n, C, T] float32 volts, y [n], subject [n].

    Examples
    --------
    >>> X, y, subject = make_dataset(SimConfig(n_subjects=2, trials_per_class=1, channels=("C3", "C4")), 0.5, 1.5)
    >>> X.shape, subject.tolist()
    ((4, 2, 128), [0, 0, 1, 1])
    """
    recs = simulate_recordings(cfg)
    parts = [epochs_from_recording(r, tmin, tmax, cfg.classes) for r in recs]
    X = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    subj = np.concatenate([np.full(len(p[1]), r.subject) for p, r in zip(parts, recs)])
    return X, y, subj


def bandpower(X: np.ndarray, sfreq: float, band: tuple[float, float]) -> np.ndarray:
    """Mean periodogram power in ``band`` (Hz): X [..., T] -> [...].

    Hann-windowed ``|rfft|^2``, averaged over the frequencies in the closed band.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.arange(256) / 128.0
    >>> x = np.stack([np.sin(2 * np.pi * 10 * t), np.sin(2 * np.pi * 30 * t)])   # 10 Hz and 30 Hz
    >>> mu = bandpower(x, 128.0, (8, 13))
    >>> bool(mu[0] > 100 * mu[1])
    True
    """
    f = np.fft.rfftfreq(X.shape[-1], 1.0 / sfreq)
    P = np.abs(np.fft.rfft(X * np.hanning(X.shape[-1]), axis=-1)) ** 2
    sel = (f >= band[0]) & (f <= band[1])
    return P[..., sel].mean(axis=-1)
