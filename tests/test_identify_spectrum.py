"""Reading observed spectra from files (identify.read_spectrum) and the library-side errors."""
import json

import numpy as np
import pytest

from attnspec import MHSAConfig
from attnspec.identify import SpectrumError, SpectrumFileError, check_spectrum, read_spectrum


def test_every_format_reads_the_same_numbers(tmp_path):
    x = np.array([0.25, 1.5, 2.0, 3.75])
    np.save(tmp_path / "e.npy", x)                 # a 2-D array is refused (a matrix is not its spectrum)
    (tmp_path / "e.csv").write_text("eigenvalue\n0.25, 1.5\n2.0;3.75\n")
    (tmp_path / "e.txt").write_text("0.25 1.5\t2.0\n3.75")
    cfg = MHSAConfig.uniform(4, 8, target="attention").to_dict()
    (tmp_path / "e.json").write_text(json.dumps({"surrogate_eigenvalues": [9.0], "softmax_eigenvalues": x.tolist(),
                                                 "config": cfg}))
    for name in ("e.npy", "e.csv", "e.txt"):
        eigs, got_cfg = read_spectrum(tmp_path / name)
        np.testing.assert_array_equal(eigs, x)
        assert got_cfg is None
    eigs, got_cfg = read_spectrum(tmp_path / "e.json", model="softmax")
    np.testing.assert_array_equal(eigs, x)
    assert MHSAConfig.from_dict(got_cfg) == MHSAConfig.from_dict(cfg)
    assert read_spectrum(tmp_path / "e.json", model="surrogate")[0].tolist() == [9.0]


@pytest.mark.parametrize("name,content,words", [
    ("e.bin", b"\x00", ["unknown format", ".npy"]),
    ("e.json", b"{", ["not valid JSON"]),
    ("e.json", b'{"other": [1]}', ["no 'softmax_eigenvalues'"]),
    ("e.json", b'{"eigs": [1], "config": 3}', ["'config' must be an object"]),
    ("e.csv", b"1, 2\n3, x\n", ["line 2", "'x' is not a number"]),
    ("e.txt", b"\xff\xfe", ["not UTF-8"]),
])
def test_unreadable_files_name_the_file_and_the_reason(tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SpectrumFileError) as err:
        read_spectrum(path)
    assert err.value.path == path and str(path) in str(err.value)
    for w in words:
        assert w in err.value.reason
    with pytest.raises(SpectrumFileError, match="no such file"):
        read_spectrum(tmp_path / "missing.npy")


def test_a_file_error_is_a_spectrum_error_and_a_value_error():
    assert issubclass(SpectrumFileError, SpectrumError) and issubclass(SpectrumError, ValueError)
    with pytest.raises(SpectrumError, match="negative"):
        check_spectrum([-1.0] * 5 + [1.0] * 10)


def test_matrices_complex_numbers_and_booleans_are_refused(tmp_path):
    """A 20 x 20 matrix is not 400 eigenvalues, imaginary parts are not dropped, and JSON true is not 1.0."""
    m = tmp_path / "m.npy"
    np.save(m, np.eye(20))
    with pytest.raises(SpectrumFileError, match="20 x 20 array, not a list of eigenvalues"):
        read_spectrum(m)
    c = tmp_path / "c.npy"
    np.save(c, np.array([1.0 + 2.0j, 3.0]))
    with pytest.raises(SpectrumFileError, match="complex numbers"):
        read_spectrum(c)
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"eigenvalues": [0.5, True, 2.0]}))
    with pytest.raises(SpectrumFileError, match="true/false"):
        read_spectrum(b)
    col = tmp_path / "col.npy"                                # a column vector is a list of eigenvalues
    np.save(col, np.arange(3.0)[:, None])
    assert read_spectrum(col)[0].tolist() == [0.0, 1.0, 2.0]
