"""The result of a diagnosis: the tables built from the merged accumulators, their intervals and verdicts, the
summary, the column vocabulary and the :class:`Diagnosis` object."""
