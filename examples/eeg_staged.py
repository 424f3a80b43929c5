"""Staged local-temporal decoder on simulated motor-imagery EEG: train, evaluate, diagnose.

Stage 1: convolutions at three temporal scales (15, 31, 63 samples) with spatial filters and log
band power; stage 2: two transformer layers attending over time tokens (attnspec.zoo.staged).

    python examples/eeg_staged.py
    python examples/eeg_staged.py --quick
"""
from _zoo_common import parser, print_diagnosis, run

if __name__ == "__main__":
    args = parser(__doc__.splitlines()[0], "staged").parse_args()
    exp = run("staged", args)
    print_diagnosis(exp)
    print("RESULT " + exp.result.line("staged"))
