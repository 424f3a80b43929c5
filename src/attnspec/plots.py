"""Former home of the spectrum figures, now :mod:`attnspec.figures`; these names are re-exported from there.

New code imports ``from attnspec.figures import plot_law, plot_spectra, save_figure``.
"""
from .figures import plot_law, plot_spectra, save_figure

__all__ = ["plot_law", "plot_spectra", "save_figure"]
