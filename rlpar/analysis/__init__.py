"""Reading run directories, sweeps and searches into tables and curves (shared by the report and notebooks)."""

from rlpar.analysis.benchmark import benchmark_rows
from rlpar.analysis.runs import Run, is_search_dir, load_runs
from rlpar.analysis.search import Search, load_search
from rlpar.analysis.summary import learning_curve, scaling_rows, summary_rows

__all__ = [
    "Run",
    "Search",
    "benchmark_rows",
    "is_search_dir",
    "load_runs",
    "load_search",
    "learning_curve",
    "scaling_rows",
    "summary_rows",
]
