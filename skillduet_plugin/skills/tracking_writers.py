"""Tracker writers around objects the trainer already made: a TensorBoard ``SummaryWriter``, the W&B module or
run, the console. Duck-typed (no tracker SDK is imported here, none is created): the adapters pick the objects
out of verl's ``Tracking`` or TRL's callbacks and wrap them.
"""

from __future__ import annotations

import html
from typing import Any, Callable, Sequence

from skillduet_plugin.skills.tracking import markdown_table


class TensorBoardWriter:
    """Texts and tables (as Markdown tables) in TensorBoard's text tab, via ``SummaryWriter.add_text``."""

    def __init__(self, summary_writer: Any) -> None:
        self.summary_writer = summary_writer

    def text(self, tag: str, markdown: str, step: int) -> None:
        self.summary_writer.add_text(tag, markdown, global_step=int(step))
        self.summary_writer.flush()

    def table(self, tag: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        self.text(tag, markdown_table(columns, rows), step)


class WandbWriter:
    """Tables as ``wandb.Table`` and texts as ``wandb.Html`` (a ``<pre>`` block) on the trainer's W&B run.

    Args:
        wandb: the ``wandb`` module the trainer logs through (its ``Table``/``Html`` and its current run).
        step_key: None to log with ``step=`` (verl logs that way); a metric name to log the step as a value
            instead (TRL lets W&B count its own steps and logs ``train/global_step``; an explicit ``step=``
            there would fight W&B's counter).
    """

    def __init__(self, wandb: Any, *, step_key: str | None = None) -> None:
        self.wandb = wandb
        self.step_key = step_key

    def _log(self, data: dict[str, Any], step: int) -> None:
        run = getattr(self.wandb, "run", None)
        if run is None:  # the trainer finished (or never started) its run: nothing to log to
            return
        if self.step_key is None:
            run.log(data, step=int(step))
        else:
            run.log({**data, self.step_key: int(step)})

    def text(self, tag: str, markdown: str, step: int) -> None:
        self._log({tag: self.wandb.Html(f"<pre>{html.escape(markdown)}</pre>")}, step)

    def table(self, tag: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        data = [[str(v) for v in row] for row in rows]
        self._log({tag: self.wandb.Table(columns=list(columns), data=data)}, step)


class ConsoleWriter:
    """Global texts in full and a short line per table (the console is read by a person scrolling a log)."""

    def __init__(self, print_fn: Callable[[str], None] = print, *, max_rows: int = 3) -> None:
        self.print_fn = print_fn
        self.max_rows = int(max_rows)

    def text(self, tag: str, markdown: str, step: int) -> None:
        self.print_fn(f"[{tag} step {step}]\n{markdown}")

    def table(self, tag: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        shown = markdown_table(columns, list(rows)[: self.max_rows])
        more = f"\n({len(rows) - self.max_rows} more rows)" if len(rows) > self.max_rows else ""
        self.print_fn(f"[{tag} step {step}]\n{shown}{more}")


__all__ = ["ConsoleWriter", "TensorBoardWriter", "WandbWriter"]
