"""Diffuse-attention correction on simulated motor-imagery EEG: does sharpening diffuse heads help?

Two DiffuseCorrectionNet models (attnspec.zoo.diffuse) are trained with the same seed, one with the
correction off and one with it on. Each is then evaluated with the correction off and on (same
weights), reporting held-out accuracy and the fraction of heads flagged diffuse by

* the zoo's in-model detector (normalized attention entropy against the Gaussian-equivalent null,
  attnspec.zoo.entropy_gap): the score the correction itself uses;
* attnspec's diagnosis (spectral selection score against a null head, attnspec.diagnostics).

    python examples/eeg_diffuse_correction.py
    python examples/eeg_diffuse_correction.py --quick
"""
from _zoo_common import parser, run

if __name__ == "__main__":
    import pandas as pd
    from attnspec import diagnose
    from attnspec.zoo.entropy_gap import entropy_gap_table
    from attnspec.zoo.train import evaluate

    p = parser(__doc__.splitlines()[0], "diffuse")
    args = p.parse_args()
    base_out = args.out
    rows, models = [], {}
    for trained_with in (False, True):
        args.out = f"{base_out}/trained_correction_{'on' if trained_with else 'off'}"
        exp = run("diffuse", args, dict(correction=trained_with))
        models[trained_with] = exp
        print(exp.result.line(f"diffuse (trained with correction {'on' if trained_with else 'off'})"))
        for eval_with in (False, True):
            m = exp.model.set_correction(eval_with)
            tab = entropy_gap_table(m, exp.X_test)
            row = dict(trained="on" if trained_with else "off", evaluated="on" if eval_with else "off",
                       accuracy=evaluate(m, exp.X_test, exp.y_test), chance=exp.result.chance,
                       diffuse_entropy=f"{int(tab.flat.sum())}/{len(tab)}",
                       frac_entropy=float(tab.flat.mean()), mean_selection_entropy=float(tab.entropy_gap.mean()))
            if not args.no_diagnose:
                d = diagnose(m, exp.X_test[:args.diagnose_trials])
                lab = d.heads.selection.value_counts()
                row.update(diffuse_diagnose=f"{int(d.heads.diffuse.sum())}/{len(d.heads)}",
                           labels_diagnose=" ".join(f"{k}={int(lab.get(k, 0))}" for k in ("diffuse", "sparse", "selective")),
                           score_scale=float(d.heads.score_scale.mean()),
                           frac_diagnose=float(d.heads.diffuse.mean()),
                           mean_selection_score=float(d.heads.selection_score.mean()))
            rows.append(row)
        exp.model.set_correction(trained_with)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    table.to_csv(f"{base_out}/diffuse_correction.csv", index=False)
    off = table[(table.trained == "off") & (table.evaluated == "off")].iloc[0]
    on = table[(table.trained == "on") & (table.evaluated == "on")].iloc[0]
    line = (f"RESULT diffuse correction: heads flagged diffuse (entropy vs null) {off.diffuse_entropy} without -> "
            f"{on.diffuse_entropy} with correction")
    if "diffuse_diagnose" in table:
        line += (f"; by attnspec.diagnostics {off.diffuse_diagnose} -> {on.diffuse_diagnose} "
                 f"({off.labels_diagnose} -> {on.labels_diagnose})")
    line += f"; held-out accuracy {off.accuracy:.3f} -> {on.accuracy:.3f} (chance {off.chance:.3f})"
    print(line)
