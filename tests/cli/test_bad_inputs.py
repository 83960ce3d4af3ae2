"""The bad-input suite: every kind of bad file and flag a user can give is refused the same way.

Each case is a small experiment made bad in one way (a `--set` override, or the file's text).
`validate` and `run` must both exit 2 with the same single line, no traceback, the key or line
named, and `run` must leave nothing in its `--out` folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app

BASE = """\
name: bad
seed: 1
model: llama-3.1-8b
hardware: h100-sxm
max_model_len: 4096
workload:
  arrivals: {kind: poisson, rate: 2.0}
  prompt_tokens: {kind: fixed, value: 64}
  output_tokens: {kind: fixed, value: 8}
  num_requests: 4
policies:
  - {name: s, kind: static, max_batch_size: 4}
  - {name: c, kind: continuous, max_num_seqs: 16}
  - {name: k, kind: chunked_prefill, token_budget: 512}
"""

# (id, --set overrides, expected text of the one line)
SETS: list[tuple[str, list[str], str]] = [
    ("unknown top key", ["colour=blue"], "colour: unknown key"),
    ("unknown arm key", ["policies.1.colour=1"], "policies.1.colour: unknown key"),
    ("unknown arm kind", ["policies.0.kind=magic"], "policies.0"),
    ("unknown model", ["model=gpt-17"], "gpt-17"),
    ("unknown gpu", ["hardware=tpu-v9"], "tpu-v9"),
    ("unknown engine", ["engine=tgi"], "tgi"),
    ("model path missing", ["model=./nope.json"], "nope.json"),
    ("hardware path missing", ["hardware=./nope.yaml"], "nope.yaml"),
    ("engine path missing", ["engine=./nope.yaml"], "nope.yaml"),
    ("empty name", ["name="], "name"),
    ("seed negative", ["seed=-1"], "seed"),
    ("seed string", ["seed=abc"], "seed"),
    ("seed bool", ["seed=true"], "seed: expected a number, not a true/false value"),
    ("tp zero", ["tensor_parallel=0"], "tensor_parallel"),
    ("tp bool", ["tensor_parallel=true"], "tensor_parallel: expected a number"),
    ("tp wider than a node without a network", ["tensor_parallel=16", "hardware=a100-sxm-80gb"],
     "tensor_parallel"),
    ("tp not a power fit", ["tensor_parallel=3"], "tensor_parallel"),
    ("pp zero", ["pipeline_parallel=0"], "pipeline_parallel"),
    ("replicas zero", ["replicas=0"], "replicas"),
    ("memory share zero", ["gpu_memory_utilization=0"], "gpu_memory_utilization"),
    ("memory share above one", ["gpu_memory_utilization=1.5"], "gpu_memory_utilization"),
    ("memory share bool", ["gpu_memory_utilization=true"], "gpu_memory_utilization"),
    ("memory share nan", ["gpu_memory_utilization=.nan"], "gpu_memory_utilization"),
    ("max_model_len zero", ["max_model_len=0"], "max_model_len"),
    ("max_model_len text", ["max_model_len=long"], "max_model_len"),
    ("weights dtype", ["dtype.weights=int3"], "dtype.weights"),
    ("kv dtype", ["dtype.kv_cache=int3"], "dtype.kv_cache"),
    ("block size zero", ["kv_cache.block_size=0"], "kv_cache.block_size"),
    ("num_blocks zero", ["kv_cache.num_blocks=0"], "kv_cache.num_blocks"),
    ("kv unknown key", ["kv_cache.colour=1"], "kv_cache.colour: unknown key"),
    ("warmup negative", ["warmup_s=-1"], "warmup_s"),
    ("cooldown text", ["cooldown_s=x"], "cooldown_s"),
    ("slo negative", ["slo.ttft_p99_s=-1"], "slo.ttft_p99_s"),
    ("slo unknown", ["slo.latency=1"], "slo.latency: unknown key"),
    ("arrivals unknown kind", ["workload.arrivals.kind=bursty"], "workload.arrivals"),
    ("rate zero", ["workload.arrivals.rate=0"], "workload.arrivals.rate"),
    ("rate negative", ["workload.arrivals.rate=-3"], "workload.arrivals.rate"),
    ("rate inf", ["workload.arrivals.rate=.inf"], "workload.arrivals.rate"),
    ("rate text", ["workload.arrivals.rate=fast"], "workload.arrivals.rate"),
    ("gamma without cv", ["workload.arrivals={kind: gamma, rate: 1}"], "workload.arrivals.cv"),
    ("gamma cv zero", ["workload.arrivals={kind: gamma, rate: 1, cv: 0}"], "workload.arrivals.cv"),
    ("closed loop zero users", ["workload.arrivals={kind: closed_loop, concurrency: 0}"],
     "workload.arrivals.concurrency"),
    ("closed loop think negative",
     ["workload.arrivals={kind: closed_loop, concurrency: 2, think_time_s: -1}"],
     "workload.arrivals.think_time_s"),
    ("trace missing file", ["workload.arrivals={kind: trace, path: gone.csv}",
                            "workload.prompt_tokens=null", "workload.output_tokens=null"],
     "gone.csv"),
    ("trace with lengths", ["workload.arrivals={kind: trace, path: azure2023-conv}"],
     "not allowed with trace arrivals"),
    ("trace bad format", ["workload.arrivals={kind: trace, path: x.csv, format: xml}",
                          "workload.prompt_tokens=null", "workload.output_tokens=null"],
     "workload.arrivals.format"),
    ("trace csv without columns", ["workload.arrivals={kind: trace, path: x.csv, format: csv}",
                                   "workload.prompt_tokens=null",
                                   "workload.output_tokens=null"], "columns: required"),
    ("trace window reversed",
     ["workload.arrivals={kind: trace, path: azure2023-conv, window_s: [5, 1]}",
      "workload.prompt_tokens=null", "workload.output_tokens=null"], "window_s"),
    ("trace sample zero",
     ["workload.arrivals={kind: trace, path: azure2023-conv, sample_fraction: 0}",
      "workload.prompt_tokens=null", "workload.output_tokens=null"], "sample_fraction"),
    ("trace scale and rate",
     ["workload.arrivals={kind: trace, path: azure2023-conv, time_scale: 2, target_rate: 1}",
      "workload.prompt_tokens=null", "workload.output_tokens=null"], "target_rate"),
    ("shipped trace in wrong format",
     ["workload.arrivals={kind: trace, path: azure2023-conv, format: mooncake}",
      "workload.prompt_tokens=null", "workload.output_tokens=null"], "azure2023-conv"),
    ("no stop rule", ["workload.num_requests=null"], "duration_s or num_requests"),
    ("two stop rules", ["workload.duration_s=10"], "duration_s or num_requests"),
    ("requests beyond memory", ["workload.num_requests=100000000000"], "workload.num_requests"),
    ("requests zero", ["workload.num_requests=0"], "workload.num_requests"),
    ("requests bool", ["workload.num_requests=true"], "workload.num_requests"),
    ("duration negative", ["workload.num_requests=null", "workload.duration_s=-5"],
     "workload.duration_s"),
    ("prompt missing", ["workload.prompt_tokens=null"], "workload.prompt_tokens"),
    ("output missing", ["workload.output_tokens=null"], "workload.output_tokens"),
    ("length kind unknown", ["workload.prompt_tokens={kind: zipf, value: 2}"],
     "workload.prompt_tokens"),
    ("fixed length zero", ["workload.prompt_tokens={kind: fixed, value: 0}"],
     "workload.prompt_tokens.value"),
    ("uniform reversed", ["workload.prompt_tokens={kind: uniform, low: 50, high: 10}"],
     "workload.prompt_tokens"),
    ("lognormal mean zero", ["workload.prompt_tokens={kind: lognormal, mean: 0, cv: 1}"],
     "workload.prompt_tokens.mean"),
    ("lognormal cv negative", ["workload.prompt_tokens={kind: lognormal, mean: 10, cv: -1}"],
     "workload.prompt_tokens.cv"),
    ("geometric mean below one", ["workload.output_tokens={kind: geometric, mean: 0.5}"],
     "workload.output_tokens.mean"),
    ("empirical missing file", ["workload.prompt_tokens={kind: empirical, path: none.csv, "
                                "column: n}"], "none.csv"),
    ("mixture without components", ["workload.prompt_tokens={kind: mixture, components: []}"],
     "workload.prompt_tokens.components"),
    ("mixture negative weight",
     ["workload.prompt_tokens={kind: mixture, components: [{weight: -1, kind: fixed, "
      "value: 3}]}"], "workload.prompt_tokens.components"),
    ("corpus with lengths", ["workload.lengths={kind: corpus, path: sharegpt-lengths}"],
     "not allowed with lengths"),
    ("corpus missing", ["workload.lengths={kind: corpus, path: nope.csv}",
                        "workload.prompt_tokens=null", "workload.output_tokens=null"],
     "nope.csv"),
    ("corpus order unknown",
     ["workload.lengths={kind: corpus, path: sharegpt-lengths, order: sorted}",
      "workload.prompt_tokens=null", "workload.output_tokens=null"], "workload.lengths.order"),
    ("corpus column missing",
     ["workload.lengths={kind: corpus, path: sharegpt-lengths, prompt_column: nope}",
      "workload.prompt_tokens=null", "workload.output_tokens=null"], "nope"),
    ("tenants with arrivals", ["workload.tenants=[{name: a, arrivals: {kind: poisson, rate: 1},"
                               " prompt_tokens: {kind: fixed, value: 4}, output_tokens: "
                               "{kind: fixed, value: 4}}]"], "not allowed with tenants"),
    ("duplicate arm", ["policies.1.name=s"], "policies"),
    ("no arms", ["policies=[]"], "policies"),
    ("static batch zero", ["policies.0.max_batch_size=0"], "policies.0.max_batch_size"),
    ("static wait negative", ["policies.0.max_wait_s=-1"], "policies.0.max_wait_s"),
    ("static wait beyond an hour", ["policies.0.max_wait_s=100000"], "policies.0.max_wait_s"),
    ("static output zero", ["policies.0.max_output_tokens=0"], "policies.0.max_output_tokens"),
    ("continuous seqs zero", ["policies.1.max_num_seqs=0"], "policies.1.max_num_seqs"),
    ("continuous seqs bool", ["policies.1.max_num_seqs=true"], "policies.1.max_num_seqs"),
    ("continuous preemption", ["policies.1.preemption=drop"], "policies.1.preemption"),
    ("continuous budget below a request", ["policies.1.max_num_batched_tokens=16"],
     "policies.1"),
    ("chunk budget zero", ["policies.2.token_budget=0"], "policies.2.token_budget"),
    ("chunk budget text", ["policies.2.token_budget=big"], "policies.2.token_budget"),
    ("chunk threshold zero", ["policies.2.long_prefill_token_threshold=0"],
     "policies.2.long_prefill_token_threshold"),
    ("chunk mixed not bool", ["policies.2.mixed_prefill=sometimes"],
     "policies.2.mixed_prefill"),
    ("ordering unknown", ["policies.1.ordering={kind: lifo}"], "policies.1.ordering"),
    ("arm deployment unknown gpu", ["policies.1.deployment={hardware: tpu-v9}"], "tpu-v9"),
    ("arm deployment unknown key", ["policies.1.deployment={colour: 1}"],
     "policies.1.deployment.colour: unknown key"),
    ("disaggregated pool of none", ["policies.2={name: d, kind: disaggregated, "
                                    "prefill_replicas: 0}"], "policies.2.prefill_replicas"),
    ("disaggregated unknown gpu", ["policies.2={name: d, kind: disaggregated, "
                                   "decode_hardware: tpu-v9}"], "tpu-v9"),
    ("router unknown", ["replicas=2", "router=psychic"], "router"),
    ("output bins too fine", ["output.timeseries_bin_s=0.0000001"],
     "output.timeseries_bin_s"),
    ("output unknown key", ["output.format=xml"], "output.format: unknown key"),
    ("replications zero", ["replications=0"], "replications"),
    ("sweep without values", ["sweep={parameter: seed}"], "sweep.0.values"),
    ("sweep of an unknown key", ["sweep={parameter: colour, values: [1, 2]}"], "colour"),
    ("pricing negative", ["pricing={h100-sxm: -1}"], "pricing"),
    ("set without equals", ["seed"], "--set seed"),
    ("set empty key", ["=3"], "--set =3"),
    ("set into a number", ["seed.x=1"], "--set seed.x=1"),
    ("set bad yaml value", ["seed=[1,"], "--set seed=[1,"),
    ("set index out of range", ["policies.9.max_num_seqs=3"], "policies.9"),
]


def _exp(tmp_path: Path, text: str = BASE) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _refused(args: list[str]) -> str:
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, (args, done.output)
    assert "Traceback" not in done.output, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1, done.output
    return lines[0]


def _both_refuse(path: Path, sets: list[str], expected: str, out: Path) -> None:
    flags = [f for s in sets for f in ("--set", s)]
    in_validate = _refused(["validate", str(path), *flags])
    in_run = _refused(["run", str(path), *flags, "--out", str(out)])
    assert expected in in_validate, in_validate
    assert in_run == in_validate
    assert not out.exists(), "run wrote into --out before refusing"


def test_the_base_experiment_is_good(tmp_path: Path) -> None:
    assert CliRunner().invoke(app, ["validate", str(_exp(tmp_path))]).exit_code == 0


@pytest.mark.parametrize(("sets", "expected"), [case[1:] for case in SETS],
                         ids=[case[0] for case in SETS])
def test_a_bad_key_or_flag_is_one_line_in_validate_and_run(tmp_path: Path, sets: list[str],
                                                           expected: str) -> None:
    _both_refuse(_exp(tmp_path), sets, expected, tmp_path / "out")


# (id, file text, expected text of the one line)
FILES: list[tuple[str, str, str]] = [
    ("empty file", "", "the top level must be a mapping"),
    ("a list", "- 1\n- 2\n", "the top level must be a mapping"),
    ("a scalar", "hello\n", "the top level must be a mapping"),
    ("tab indentation", BASE.replace("  arrivals", "\tarrivals"), "invalid YAML"),
    ("unclosed bracket", BASE.replace("{kind: poisson, rate: 2.0}", "{kind: poisson"),
     "invalid YAML"),
    ("duplicate key", BASE + "seed: 2\n", "seed"),
    ("missing model", BASE.replace("model: llama-3.1-8b\n", ""), "model"),
    ("missing hardware", BASE.replace("hardware: h100-sxm\n", ""), "hardware"),
    ("missing workload", BASE.split("workload:")[0] + "policies: [{name: s, kind: static}]\n",
     "workload"),
    ("missing policies", BASE.split("policies:")[0], "policies"),
    ("binary junk", "\x00\x01\x02name: x\n", "bad.yaml"),
    ("alias bomb", "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 13)),
     "YAML aliases"),
    ("deep nesting", "name: " + "[" * 300 + "]" * 300 + "\n", "nested too deeply"),
    ("python tag", BASE + "extra: !!python/object:os.system ls\n", "invalid YAML"),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in FILES],
                         ids=[case[0] for case in FILES])
def test_a_bad_file_is_one_line_in_validate_and_run(tmp_path: Path, text: str,
                                                    expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(text.encode("utf-8"))
    _both_refuse(path, [], expected, tmp_path / "out")


def test_a_missing_or_folder_experiment_is_one_line(tmp_path: Path) -> None:
    _both_refuse(tmp_path / "none.yaml", [], "file not found", tmp_path / "out")
    _both_refuse(tmp_path, [], "is a directory", tmp_path / "out")


def test_the_suite_has_a_hundred_distinct_cases() -> None:
    ids = [case[0] for case in SETS] + [case[0] for case in FILES]
    assert len(set(ids)) == len(ids) >= 100
