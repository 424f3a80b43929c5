"""Simulated MI-EEG generator and MNE file round trips (attnspec.zoo.eeg_sim, attnspec.zoo.eeg_io)."""
import numpy as np
import pytest

from attnspec.zoo.eeg_io import BCI_IV_2A_FILE_LABELS, read_mi_epochs, write_recording
from attnspec.zoo.eeg_sim import (BCI_IV_2A_CHANNELS, EVENT_ID, SimConfig, bandpower, epochs_from_recording,
                                  make_dataset, simulate_recordings)

SMALL = SimConfig(n_subjects=1, trials_per_class=6)


def _lat(X, sf, band=(8, 13)):
    bp = bandpower(X, sf, band)
    return np.log(bp[:, BCI_IV_2A_CHANNELS.index("C3")] / bp[:, BCI_IV_2A_CHANNELS.index("C4")])


def test_deterministic_by_seed():
    a, b = simulate_recordings(SMALL), simulate_recordings(SMALL)
    c = simulate_recordings(SimConfig(n_subjects=1, trials_per_class=6, seed=1))
    assert np.array_equal(a[0].data, b[0].data) and np.array_equal(a[0].events, b[0].events)
    assert not np.allclose(a[0].data[:, :1000], c[0].data[:, :1000])


def test_shapes_units_rate_and_events():
    rec = simulate_recordings(SMALL)[0]
    assert rec.data.shape[0] == 22 and rec.sfreq == 128.0
    assert 2e-6 < rec.data.std() < 50e-6                       # tens of microvolts, stored in volts
    codes = rec.events[:, 2]
    assert (codes == 768).sum() == 12 and (codes == EVENT_ID["left_hand"]).sum() == 6
    X, y = epochs_from_recording(rec)
    assert X.shape == (12, 22, 256) and X.dtype == np.float32 and sorted(np.bincount(y)) == [6, 6]


def test_contralateral_erd_in_c3_c4_band_power():
    cfg = SimConfig(n_subjects=2, trials_per_class=15)
    X, y, _ = make_dataset(cfg)
    for band in ((8, 13), (13, 30)):
        r = _lat(X, cfg.sfreq, band)
        # right-hand imagery desynchronizes C3 (left hemisphere): log(P_C3/P_C4) drops
        diff = r[y == 0].mean() - r[y == 1].mean()
        pooled = np.sqrt(0.5 * (r[y == 0].var() + r[y == 1].var()))
        assert diff > 0.5 * pooled, band
    # imagery vs rest (fixation before the cue): mu power at the contralateral electrode drops
    rec = simulate_recordings(SimConfig(n_subjects=1, trials_per_class=15))[0]
    Xm, ym = epochs_from_recording(rec, 0.5, 2.5)
    Xr, _ = epochs_from_recording(rec, -1.75, 0.25)
    c3 = BCI_IV_2A_CHANNELS.index("C3")
    drop = bandpower(Xm[ym == 1, c3], 128, (8, 13)) / bandpower(Xr[ym == 1, c3], 128, (8, 13))
    assert np.median(drop) < 0.6


def test_feet_erd_at_cz_and_four_classes():
    cfg = SimConfig(n_subjects=1, trials_per_class=15, classes=("left_hand", "right_hand", "feet", "tongue"))
    X, y, _ = make_dataset(cfg)
    assert sorted(np.unique(y)) == [0, 1, 2, 3]
    cz = BCI_IV_2A_CHANNELS.index("Cz")
    p = np.log(bandpower(X[:, cz], 128, (8, 13)))
    assert p[y == 2].mean() < p[(y == 0) | (y == 1)].mean() - 0.3


def test_one_over_f_background_and_mu_peak():
    rec = simulate_recordings(SimConfig(n_subjects=1, trials_per_class=4))[0]
    x = rec.data[BCI_IV_2A_CHANNELS.index("Fz")]
    lo, hi = bandpower(x, 128, (2, 4)), bandpower(x, 128, (40, 48))
    assert lo > 10 * hi
    c3 = rec.data[BCI_IV_2A_CHANNELS.index("C3")]
    mu_f = rec.params["mu_hz"]
    assert bandpower(c3, 128, (mu_f - 1, mu_f + 1)) > 2 * bandpower(c3, 128, (mu_f + 3, mu_f + 5))


def test_fif_round_trip_preserves_data_and_events(tmp_path):
    rec = simulate_recordings(SMALL)[0]
    X, y = epochs_from_recording(rec)
    ep = read_mi_epochs(write_recording(rec, tmp_path / "sub-01_eeg.fif"))
    assert ep.ch_names == list(BCI_IV_2A_CHANNELS) and ep.sfreq == 128.0
    assert np.array_equal(ep.y, y)
    assert np.array_equal(ep.event_samples, rec.events[np.isin(rec.events[:, 2], [769, 770]), 0])
    np.testing.assert_allclose(ep.X, X, rtol=1e-6, atol=1e-12)


def test_edf_round_trip_with_bci_iv_2a_layout(tmp_path):
    pytest.importorskip("edfio")
    import mne

    rec = simulate_recordings(SMALL)[0]
    X, y = epochs_from_recording(rec)
    path = write_recording(rec, tmp_path / "A01T.edf", bci2a_layout=True)
    raw = mne.io.read_raw(path, verbose="error")
    assert raw.ch_names[:22] == list(BCI_IV_2A_FILE_LABELS) and raw.ch_names[22:] == ["EOG-left", "EOG-central", "EOG-right"]
    ep = read_mi_epochs(path)                          # EOG dropped, numbered labels renamed
    assert ep.ch_names == list(BCI_IV_2A_CHANNELS)
    assert np.array_equal(ep.y, y)
    # EDF stores 16-bit integers: agreement to the quantization step
    assert np.abs(ep.X - X).max() < 1e-3 * np.abs(X).max()


def test_reader_resamples(tmp_path):
    rec = simulate_recordings(SimConfig(n_subjects=1, trials_per_class=2))[0]
    ep = read_mi_epochs(write_recording(rec, tmp_path / "r_eeg.fif"), tmin=0.5, tmax=2.5, resample=100.0)
    assert ep.X.shape == (4, 22, 200) and ep.sfreq == 100.0
