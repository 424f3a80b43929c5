"""SPD-manifold attention on simulated motor-imagery EEG: train, evaluate, diagnose.

Tokens are covariance matrices of (frequency band, time segment) pieces of each trial, mapped to
the tangent space at the bands' Riemannian means (pyriemann), then attended over
(attnspec.zoo.spd).

    python examples/eeg_spd.py
    python examples/eeg_spd.py --quick
"""
from _zoo_common import parser, print_diagnosis, run

if __name__ == "__main__":
    args = parser(__doc__.splitlines()[0], "spd").parse_args()
    exp = run("spd", args)
    print_diagnosis(exp)
    print("RESULT " + exp.result.line("spd"))
