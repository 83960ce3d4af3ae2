"""Input that would hang, crash or exhaust memory is refused up front, in one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from batchsim.apps.cli import app


def _validate(tmp_path: Path, text: str) -> str:
    path = tmp_path / "e.yaml"
    path.write_text(text, encoding="utf-8")
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1
    return done.output


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 13)]
    output = _validate(tmp_path, "\n".join(lines) + "\nname: e\n")
    assert "108 YAML aliases" in output and "at most 100" in output


def test_deep_nesting_is_one_line(tmp_path: Path) -> None:
    output = _validate(tmp_path, "name: " + "[" * 3000 + "]" * 3000 + "\n")
    assert "nested too deeply" in output


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    text = ("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
            "workload: {arrivals: {kind: poisson, rate: 1}, num_requests: 5,\n"
            "  prompt_tokens: &len {kind: fixed, value: 8}, output_tokens: *len}\n"
            "policies: [{name: a, kind: continuous}]\n")
    path = tmp_path / "ok.yaml"
    path.write_text(text, encoding="utf-8")
    assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 0


def _workload_file(tmp_path: Path, workload: str, extra: str = "") -> str:
    return ("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
            f"workload: {{arrivals: {{kind: poisson, rate: 1}}, {workload},\n"
            "  prompt_tokens: {kind: fixed, value: 8}, output_tokens: {kind: fixed, value: 4}}\n"
            f"policies: [{{name: a, kind: continuous}}]\n{extra}")


def test_a_request_count_beyond_memory_is_refused_up_front(tmp_path: Path) -> None:
    output = _validate(tmp_path, _workload_file(tmp_path, "num_requests: 1000000000000"))
    assert "workload.num_requests: expected a value <= 1e+07" in output


def test_microsecond_time_series_bins_are_refused(tmp_path: Path) -> None:
    output = _validate(tmp_path, _workload_file(tmp_path, "num_requests: 10",
                                                "output: {timeseries_bin_s: 0.000001}\n"))
    assert "output.timeseries_bin_s: expected a value >= 0.001" in output
