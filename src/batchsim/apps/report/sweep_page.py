"""The sweep's report page: what was swept, the knee in words, the curves, the table.

Built from the sweep's summary.json only (plus the first point's deployment line), with the
single-run page's CSS, plot sections and footer wording, so both reports read alike and the
same folder always gives the same bytes.
"""

from __future__ import annotations

from html import escape

from batchsim.apps.gpu_note import gpus_per_arm_note
from batchsim.apps.report.figures import RenderedPlot
from batchsim.apps.report.page import html_document, plot_section, setup_phrases
from batchsim.apps.report.sweep_results import (
    KNEE_SHARE,
    PanelGroup,
    Series,
    SweepResults,
    SweepRow,
    first_point_deployment,
    short_name,
    value_text,
)
from batchsim.apps.report.sweep_slo import SLO_DEFINITION, has_targets, slo_line
from batchsim.apps.report.sweep_table import COLUMNS, CSS, Column, cell_text, sweep_table_html

_PREVIEW_VALUES = 12  # swept values listed in the header before "…"
# What changes past the knee: (words, table column, unit after the numbers).
_GLANCE = (("goodput", "goodput req/s", " req/s"), ("TTFT p99", "TTFT p99", ""),
           ("preemptions", "preemptions / 1k req", " per 1,000 requests"))


def _at(results: SweepResults, row: SweepRow) -> str:
    key = results.x_parameter or ""
    return f"{short_name(key)}={value_text(row.point.get(key))}"


def _context_lines(results: SweepResults) -> list[str]:
    deployment = first_point_deployment(results)
    lines = []
    if deployment.get("memory"):
        lines.append(f"deployment (at the first point): {deployment['memory']}")
    blocks, tokens = deployment.get("kv_blocks_per_replica"), deployment.get(
        "kv_tokens_per_replica")
    if isinstance(blocks, int) and isinstance(tokens, int):
        lines.append(f"KV cache simulated: {blocks:,} blocks = {tokens:,} tokens per replica")
    note = _gpus_note(results)
    if note:
        lines.append(f"at the first point: {note}")
    if deployment.get("traffic"):
        lines.append(f"traffic at the first point: {deployment['traffic']}")
    for key in results.parameters:
        values = list(dict.fromkeys(value_text(row.point.get(key)) for row in results.rows))
        shown = ", ".join(values[:_PREVIEW_VALUES]) + (", …" if len(values) > _PREVIEW_VALUES
                                                       else "")
        lines.append(f"swept {key}: {shown} ({len(values)} values)")
    points = len({tuple(sorted(map(str, row.point.items()))) for row in results.rows})
    reps = results.replications
    lines.append(f"{points} points × {len(results.arms)} arms, {reps} replication"
                 + ("s per point with independent seeds: each number is a mean, bands and ± "
                    "are 95% confidence intervals" if reps > 1 else " per point: no intervals"))
    return [*lines, ", ".join(setup_phrases(results.config))]


def _gpus_note(results: SweepResults) -> str | None:
    """Each arm's GPUs at the first point, where an arm runs on more than the one replica the
    deployment line plans (replicas, disaggregated pools), as on a run's report."""
    tp, pp = (results.config.get(key) for key in ("tensor_parallel", "pipeline_parallel"))
    if not isinstance(tp, int) or not isinstance(pp, int):
        return None
    first = results.rows[0].point
    return gpus_per_arm_note(tp * pp, [(row.arm, _count(row.metrics.get("gpus")))
                                       for row in results.rows if row.point == first])


def _count(value: object) -> object:
    """A mean over replications of a GPU count is a float of an integer: the count."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _notes(results: SweepResults) -> list[str]:
    notes = []
    for arm in results.arms:
        rejecting = [row for row in results.rows if row.arm == arm
                     and (row.mean(("rejected",)) or 0) > 0]
        if rejecting:
            where = ", ".join(_point_text(row) for row in rejecting)
            notes.append(f"{arm} rejected requests at {where} (counted as SLO misses; the "
                         "latencies are of the requests served)")
    if results.replications == 2:
        notes.append("2 replications: the 95% interval is mean ± 12.7 × s/√2, so bands are "
                     "wide; three to five replications give usable intervals")
    deployment = first_point_deployment(results)
    if deployment.get("hardware_calibrated") is False:
        notes.append(f"{deployment.get('hardware')} uses uncalibrated efficiency priors: step "
                     "times come from its spec sheet only")
    return notes


def _point_text(row: SweepRow) -> str:
    return ", ".join(f"{short_name(k)}={value_text(v)}" for k, v in row.point.items())


def _value(row: SweepRow, label: str) -> str | None:
    column = next(c for c in COLUMNS if c.label == label)
    return None if row.mean(column.path) is None else cell_text(row, column)[0]


def _glance_line(results: SweepResults, series: Series, group: PanelGroup) -> str:
    """The knee of one curve in words, and what changes from it to the last point."""
    name = _curve_name(series, group)
    tput = next(c for c in COLUMNS if c.label == "output tok/s")
    present = [row for row in series.rows if row.mean(tput.path) is not None]
    if not present:
        return f"{name}: no throughput in summary.json"
    peak = max(present, key=lambda row: row.mean(tput.path) or 0.0)
    knee = results.knee(series)
    if knee is None:
        last = present[-1]
        return (f"{name}: no knee in the swept range — throughput {_text(last, tput)} output "
                f"tok/s at {_at(results, last)}, peak {_text(peak, tput)} at "
                f"{_at(results, peak)}")
    peak_text = "its peak" if peak is knee else (f"peak {_text(peak, tput)} at "
                                                   f"{_at(results, peak)}")
    line = (f"{name}: throughput levels off at {_at(results, knee)} "
            f"({_text(knee, tput)} output tok/s, {peak_text})")
    last = series.rows[-1]
    changes = []
    for words, label, unit in _GLANCE:
        at_knee, at_last = _value(knee, label), _value(last, label)
        if at_knee is not None and at_last is not None:
            changes.append(f"{words} {at_knee} → {at_last}{unit}")
    if changes:
        line += f". From there to {_at(results, last)}: " + ", ".join(changes)
    return line


def _text(row: SweepRow, column: Column) -> str:
    return cell_text(row, column)[0]


def _curve_name(series: Series, group: PanelGroup) -> str:
    label = group.label()
    return f"{label}, {series.arm}" if label else series.arm


def _glance(results: SweepResults) -> list[str]:
    if not results.x_is_numeric():
        return []
    curves = [(group, series) for group in results.panel_groups()
              for series in results.series(group.first)]
    lines = [slo_line(results, series, _curve_name(series, group)) for group, series in curves]
    captions = [SLO_DEFINITION] if has_targets(results) else []
    if len(results.x_values()) >= 3:
        lines += [_glance_line(results, series, group) for group, series in curves]
        captions.append(f"The knee is the first swept value at which an arm's mean output "
                        f"throughput reaches {KNEE_SHARE:.0%} of its peak over the sweep: "
                        "past it, more load buys little throughput and mostly adds waiting.")
    shown = [line for line in lines if line]
    if not shown:
        return []
    return ["<h2>At a glance</h2>",
            *(f"<p class=\"caption\">{escape(caption)}</p>" for caption in captions),
            "<ul class=\"glance\">", *(f"<li>{escape(line)}</li>" for line in shown), "</ul>"]


def _footer(results: SweepResults) -> str:
    versions = results.summary.get("versions")
    used = ", ".join(f"{k} {v}" for k, v in versions.items()) if isinstance(versions, dict) else ""
    return ("<footer>Built from summary.json in this folder (the deployment line from the "
            "first point's run); rebuild with <code>batchsim report FOLDER</code>. The PNGs "
            "are also in plots/; every point's own results are in its point-NNN folder. "
            f"Simulated with {escape(used)}.</footer>")


_TABLE_CAPTION = ("One row per point and arm: the mean over replications, and under it ± half "
                  "the 95% confidence interval. Red: a p99 whose mean is above its SLO target, "
                  "or rejected requests. Each arm's knee is flagged.")


def render_sweep_page(results: SweepResults, plots: list[RenderedPlot]) -> str:
    name = str(results.config.get("name") or results.folder.name)
    body = [f"<h1>batchsim sweep report: {escape(name)}</h1>"]
    body += [f"<p class=\"context\">{escape(line)}</p>" for line in _context_lines(results)]
    body += [f"<p class=\"note\">{escape(note)}</p>" for note in _notes(results)]
    body += _glance(results)
    body += [plot_section(plot) for plot in plots]
    body += ["<section id=\"sweep_table\">", "<h2>Per point and arm</h2>",
             f"<p class=\"caption\">{escape(_TABLE_CAPTION)}</p>", sweep_table_html(results),
             "</section>"]
    body.append(_footer(results))
    return html_document(f"batchsim sweep report: {name}", body, extra_css=CSS)
