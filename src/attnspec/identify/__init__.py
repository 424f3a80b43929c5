"""Identification of Gaussian-equivalent MHSA parameters from an observed spectrum.

* :mod:`.laws` — closed-form laws (single-head attention quartic, Marchenko–Pastur);
* :mod:`.family` — model families ``theta -> law`` (:class:`MHSAFamily`, :class:`MarchenkoPasturFamily`);
* :mod:`.fit` — minimum bulk-W1 fit, outliers above the fitted edge apart;
* :mod:`.core` — :func:`identify`: fit, parametric bootstrap intervals, calibrated goodness of fit,
  head-count profiling;
* :mod:`.tables` — law tables (:class:`TabulatedFamily`, :class:`TabulatedBetaFamily`) for fast refits;
* :mod:`.staging` — where the fits run: exact laws, or law tables around the fit;
* :mod:`.resample` — the two-stage parametric bootstrap (pilot draws, then refits of ``B`` draws);
* :mod:`.identifiability` — Fisher information of the bulk quantiles, non-identifiable directions;
* :mod:`.spectrum` — :func:`read_spectrum` (``.npy``, text, JSON files) and :func:`check_spectrum`: is the
  input a possible Gram spectrum.
"""
from .core import Identification, identify
from .family import Family, MarchenkoPasturFamily, MHSAFamily
from .fit import Fit, fit_family
from .identifiability import fisher_report, jacobian
from .laws import TabulatedLaw, attention_law, marchenko_pastur_law
from .resample import bootstrap
from .spectrum import SpectrumError, SpectrumFileError, check_spectrum, read_spectrum
from .tables import TabulatedBetaFamily, TabulatedFamily

__all__ = ["Identification", "identify", "bootstrap", "Family", "MHSAFamily", "MarchenkoPasturFamily",
           "TabulatedBetaFamily", "TabulatedFamily", "Fit", "fit_family", "fisher_report", "jacobian", "TabulatedLaw",
           "attention_law", "marchenko_pastur_law", "SpectrumError", "SpectrumFileError", "check_spectrum", "read_spectrum"]
