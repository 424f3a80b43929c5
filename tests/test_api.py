"""The top-level API: lazy entry points, and `import attnspec` stays light."""
import subprocess
import sys



def test_top_level_entry_points():
    import attnspec.diagnostics
    import attnspec.simulation
    import attnspec.theory

    assert attnspec.diagnose is attnspec.diagnostics.diagnose and callable(attnspec.diagnose)
    assert attnspec.Diagnosis is attnspec.diagnostics.Diagnosis
    assert attnspec.solve_law is attnspec.theory.solve_law
    assert attnspec.simulate is attnspec.simulation.simulate and callable(attnspec.simulate)


def test_import_does_not_pull_torch():
    code = "import sys, attnspec; attnspec.MHSAConfig.uniform(8, 8); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False"
