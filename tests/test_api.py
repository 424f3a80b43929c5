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


def test_compare_and_track_are_plain_functions_of_a_plain_package():
    import inspect
    import types

    import attnspec
    import attnspec.comparing.tracking  # noqa: F401  (importing the package's modules leaves the functions alone)

    assert inspect.isfunction(attnspec.compare) and inspect.isfunction(attnspec.track)
    assert attnspec.compare is attnspec.comparing.compare and attnspec.track is attnspec.comparing.track
    assert type(attnspec.comparing) is types.ModuleType and not callable(attnspec.comparing)
