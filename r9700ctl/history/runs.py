"""What a validate run does with the history: check the options first, compare, record, save.

Order after a run: compare with the baseline (its results join each node's report and its
verdict), then record the run (with those results), then save it as a baseline when asked.
A history that cannot be opened or written never blocks the run: the caller gets one line to
show (`HistoryPlan.notes`), the comparison results say INCONCLUSIVE, the exit code is the run's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent.report import verdict
from r9700ctl.agent.result import CheckResult
from r9700ctl.errors import CannotRun, R9700Error
from r9700ctl.history import compare
from r9700ctl.history.record import record
from r9700ctl.history.store import History, HistoryDamaged, default_path, identify, open_history


@dataclass
class HistoryPlan:
    """The history options of one validate run, checked before it starts."""

    enabled: bool = True
    compare_with: str | None = None
    save_as: str | None = None
    path: Path | None = None
    notes: list[str] = field(default_factory=list)  # one line each: what happened to the history
    run_id: str | None = None
    unavailable: str = ""  # why the history could not be used ("" when it could)
    want_trends: bool = False  # an HTML report will draw each figure's history
    trends: dict[tuple[str, str, str, str], list[float]] = field(default_factory=dict)

    def check(self) -> None:
        """Bad names and unknown baselines are bad input (exit 64) before any host is touched;
        a damaged database is only noted here (the run goes on without it)."""
        from r9700ctl.errors import BadInput

        if not self.enabled and (self.compare_with is not None or self.save_as is not None):
            flag = "--compare" if self.compare_with is not None else "--save-baseline"
            raise BadInput(what=f"{flag} needs the history, and --no-history turns it off", hint="drop one")
        if self.enabled:
            self._check_file()
        if self.save_as is not None:
            compare.check_name(self.save_as)
        if self.compare_with is not None and not self.compare_with.strip():
            raise BadInput(
                what="--compare ''", hint="name a saved baseline, or last for the node's previous run"
            )
        if self.compare_with and self.compare_with != compare.LAST:
            try:
                with open_history(self.path) as history:
                    compare.require_known(history, self.compare_with)
            except CannotRun as exc:  # damaged, or written by a newer r9700ctl
                self._lost(exc)

    def _check_file(self) -> None:
        """A file r9700ctl did not create is refused now (NotHistory, exit 64: the user named the
        wrong file), before any host is touched; a damaged one of ours is only noted."""
        path = self.path if self.path is not None else default_path()
        if not path.exists():
            return
        try:
            identify(path)
        except HistoryDamaged as exc:
            self._lost(exc)

    def _lost(self, exc: R9700Error) -> None:
        if not self.unavailable:
            self.unavailable = exc.one_line()
            self.notes.append(f"history: not used: {self.unavailable}")

    def after_run(
        self,
        nodes: Mapping[str, dict[str, Any]],
        document_for_record: Callable[[], Mapping[str, Any]],
        scope: str,
        source: str,
    ) -> dict[str, list[CheckResult]]:
        """Compare (when asked), record and save (when asked). `nodes` maps node -> its agent report
        (comparison results are appended to it in place); `document_for_record` is called after
        the comparison and returns the validate document to record. Returns the comparisons."""
        if not self.enabled:
            return {}
        comparisons: dict[str, list[CheckResult]] = {}
        try:
            with open_history(self.path) as history:
                if self.compare_with:
                    comparisons = self._compare(history, nodes)
                document = document_for_record()
                self.run_id = record(history, document, scope=scope, source=source)
                self.notes.append(f"history: run {self.run_id} recorded in {history.path}")
                if self.save_as:
                    self._save(history, nodes)
        except R9700Error as exc:  # HistoryDamaged, HistoryTooNew: the run goes on without it
            self._lost(exc)
            if self.compare_with and not comparisons:
                comparisons = self._compare_unavailable(nodes)
        if self.want_trends:
            self.trends = trends_for(self, nodes)
        return comparisons

    def _compare(self, history: History, nodes: Mapping[str, dict[str, Any]]) -> dict[str, list[CheckResult]]:
        out = {}
        assert self.compare_with is not None
        for node, report in nodes.items():
            level = str(report.get("level") or "")
            ref = compare.reference(history, self.compare_with, node, level=level, before_run="")
            results = (
                compare.compare_report(report, ref, node)
                if ref is not None
                else [compare.no_reference(self.compare_with, node, level)]
            )
            add_results(report, results)
            out[node] = results
        return out

    def _compare_unavailable(self, nodes: Mapping[str, dict[str, Any]]) -> dict[str, list[CheckResult]]:
        assert self.compare_with is not None
        out = {}
        for node, report in nodes.items():
            results = [compare.unavailable(self.compare_with, node, self.unavailable)]
            add_results(report, results)
            out[node] = results
        return out

    def _save(self, history: History, nodes: Mapping[str, dict[str, Any]]) -> None:
        assert self.save_as is not None and self.run_id is not None
        statuses = {node: str(report.get("status")) for node, report in nodes.items()}
        saved, refused = compare.save(history, self.save_as, self.run_id, statuses)
        if saved:
            self.notes.append(f"history: baseline {self.save_as!r} saved for {', '.join(saved)}")
        if refused:
            self.notes.append(
                f"history: baseline {self.save_as!r} not saved for {', '.join(refused)}: "
                "a baseline must be a run that did not fail"
            )


def add_results(report: dict[str, Any], results: list[CheckResult]) -> None:
    """Append results to an agent report and restate its status, exit code and counts."""
    report.setdefault("results", []).extend(r.to_dict() for r in results)
    report.update(verdict([str(r.get("status")) for r in report["results"] if isinstance(r, dict)]))


def trends_for(plan: HistoryPlan, nodes: Mapping[str, Mapping[str, Any]]) -> dict:
    """Each figure's history for the HTML report's sparklines; {} when there is none to read."""
    from r9700ctl.history.queries import figure_trends

    if not plan.enabled or plan.unavailable:
        return {}
    try:
        with open_history(plan.path, create=False) as history:
            return figure_trends(history, nodes)
    except R9700Error:
        return {}
