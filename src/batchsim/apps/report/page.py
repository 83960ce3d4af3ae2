"""The report page: one self-contained HTML file, its images embedded as base64 PNGs.

Nothing on the page comes from the clock or the machine (no build time, no paths outside the
folder), so the same results folder always gives the same bytes.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from batchsim.apps.gpu_note import gpus_per_arm_note
from batchsim.apps.report.figures import RenderedPlot
from batchsim.apps.report.results import RunResults
from batchsim.apps.report.table import comparison_table_html

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 1140px; margin: 1.5em auto; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.context { color: #555; margin: 0.2em 0; }
.note { background: #fff6e0; border-left: 4px solid #e69f00; padding: 0.4em 0.8em;
        margin: 0.5em 0; }
.caption { color: #444; font-size: 0.95em; }
img { max-width: 100%; height: auto; display: block; }
table.comparison { border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.comparison th, table.comparison td { padding: 0.25em 0.8em; border-bottom: 1px solid #eee; }
table.comparison thead th { border-bottom: 2px solid #999; text-align: right; }
table.comparison thead th:first-child, table.comparison tbody th { text-align: left;
       font-weight: normal; color: #333; }
table.comparison td { text-align: right; white-space: nowrap; }
td.alert { color: #b00020; font-weight: bold; }
footer { color: #777; font-size: 0.85em; margin-top: 2.5em; }
"""


def _context_lines(results: RunResults) -> list[str]:
    """Model, GPU and memory; traffic; seed, SLO and measurement window, as summary.json says."""
    deployment = results.summary.get("deployment")
    d: dict[str, Any] = deployment if isinstance(deployment, dict) else {}
    lines = [f"{label}: {d[key]}" for key, label in (("memory", "deployment"),
                                                     ("traffic", "traffic")) if d.get(key)]
    note = _gpus_note(results)
    return [*lines, *([note] if note else []), ", ".join(setup_phrases(results.config))]


def _gpus_note(results: RunResults) -> str | None:
    """Each arm's GPUs, where an arm runs on more than the one replica the memory line plans."""
    tp, pp = (results.config.get(key) for key in ("tensor_parallel", "pipeline_parallel"))
    if not isinstance(tp, int) or not isinstance(pp, int):
        return None
    return gpus_per_arm_note(tp * pp, [(arm.label, arm.metrics.get("gpus"))
                                       for arm in results.arms])


def setup_phrases(config: dict[str, Any]) -> list[str]:
    """Seed, SLO targets, warm-up and cool-down, from the resolved experiment."""
    setup = [f"seed {config['seed']}"] if "seed" in config else []
    slo = config.get("slo")
    if isinstance(slo, dict):
        setup += [f"SLO {key.removesuffix('_p99_s').upper()} p99 ≤ {value:g} s"
                  for key, value in slo.items() if isinstance(value, int | float)]
    warmup, cooldown = (config.get(key) for key in ("warmup_s", "cooldown_s"))
    setup.append(f"measured after a {warmup:g} s warm-up"
                 if isinstance(warmup, int | float) and warmup else "no warm-up")
    if isinstance(cooldown, int | float) and cooldown:
        setup.append(f"{cooldown:g} s cool-down excluded")
    return setup


def _notes(results: RunResults) -> list[str]:
    """What a reader must not miss: rejections, an uncalibrated GPU, absent tables."""
    notes = []
    for arm in results.arms:
        rejected, measured = arm.metrics.get("rejected"), arm.metrics.get("measured_requests")
        if isinstance(rejected, int) and rejected > 0:
            of = f" of {measured:,}" if isinstance(measured, int) else ""
            notes.append(f"{arm.label}: {rejected:,}{of} measured requests were "
                         "rejected (reasons in the table; each request's in requests.parquet)")
    deployment = results.summary.get("deployment")
    if isinstance(deployment, dict) and deployment.get("hardware_calibrated") is False:
        notes.append(f"{deployment.get('hardware')} uses uncalibrated efficiency priors: step "
                     "times come from its spec sheet only")
    notes += [f"{name} is missing from this folder: the plots that need it are left out"
              for name in results.missing_files]
    return notes


def plot_section(plot: RenderedPlot) -> str:
    parts = [f"<section id=\"{plot.spec.name}\">", f"<h2>{escape(plot.spec.title)}</h2>",
             f"<p class=\"caption\">{escape(plot.spec.caption)}</p>"]
    if plot.png is not None:
        data = base64.b64encode(plot.png).decode("ascii")
        parts.append(f"<img src=\"data:image/png;base64,{data}\" "
                     f"alt=\"{escape(plot.spec.title)}\">")
    parts += [f"<p class=\"note\">{escape(note)}</p>" for note in plot.notes]
    parts.append("</section>")
    return "\n".join(parts)


def _footer(results: RunResults) -> str:
    versions = results.summary.get("versions")
    used = ", ".join(f"{k} {v}" for k, v in versions.items()) if isinstance(versions, dict) else ""
    return ("<footer>Built from summary.json, requests.parquet and timeseries.parquet in this "
            "folder; rebuild with <code>batchsim report FOLDER</code>. The PNGs are also in "
            f"plots/. Simulated with {escape(used)}.</footer>")


def render_page(results: RunResults, plots: list[RenderedPlot]) -> str:
    name = str(results.config.get("name") or results.folder.name)
    body = [f"<h1>batchsim report: {escape(name)}</h1>"]
    body += [f"<p class=\"context\">{escape(line)}</p>" for line in _context_lines(results)]
    body += [f"<p class=\"note\">{escape(note)}</p>" for note in _notes(results)]
    body += ["<h2>Comparison</h2>", comparison_table_html(results)]
    body += [plot_section(plot) for plot in plots]
    body.append(_footer(results))
    return html_document(f"batchsim report: {name}", body)


def html_document(title: str, body: list[str], extra_css: str = "") -> str:
    """The page around BODY's HTML parts: title, the report's CSS, nothing fetched."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(title)}</title>\n<style>{_CSS}{extra_css}</style>\n</head>\n"
            "<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")
