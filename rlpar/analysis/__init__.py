"""Reading run directories and sweeps into tables and curves (shared by the report and notebooks)."""

from rlpar.analysis.runs import Run, load_runs
from rlpar.analysis.summary import learning_curve, scaling_rows, summary_rows

__all__ = ["Run", "load_runs", "learning_curve", "scaling_rows", "summary_rows"]
