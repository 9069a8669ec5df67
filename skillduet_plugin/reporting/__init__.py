"""``skillduet report``: a Markdown report with the plots of one run, or of several runs side by side."""

from skillduet_plugin.reporting.report import build_report
from skillduet_plugin.reporting.runs import RunData, load_run

__all__ = ["RunData", "build_report", "load_run"]
