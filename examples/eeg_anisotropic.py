"""Adaptive anisotropic attention on simulated motor-imagery EEG: train, evaluate, diagnose.

Tokens are (electrode, time patch); a temporal path attends within each electrode, a spatial path
within each time patch, and a learned gate mixes them (attnspec.zoo.anisotropic). The diagnosis
lists every head of ``blocks.0.temporal`` and ``blocks.0.spatial`` separately.

    python examples/eeg_anisotropic.py            # ~1 minute on 2 cores
    python examples/eeg_anisotropic.py --quick    # smoke run
"""
from _zoo_common import parser, print_diagnosis, run

if __name__ == "__main__":
    args = parser(__doc__.splitlines()[0], "anisotropic").parse_args()
    exp = run("anisotropic", args)
    print_diagnosis(exp)
    print("RESULT " + exp.result.line("anisotropic"))
