"""Statistics of the diagnosis: pure functions of accumulated sums (no model, no pipeline)."""
