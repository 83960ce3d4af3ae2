"""The fidelity report: held-out error per GPU and family, and predicted-vs-measured plots.

The markdown is rendered from the profiles' recorded errors and, for the sections on our own
measurements and on replayed serving benchmarks, from the small tables kept in the repository,
so a test can check that the committed `docs/fidelity.md` matches them without the public
measurement tables.
"""

from __future__ import annotations

from collections.abc import Sequence

from batchsim.calibration.end_to_end_report import read_replay_table, render_end_to_end
from batchsim.gpu.calibration_record import FAMILIES
from batchsim.gpu.hardware import GpuProfile

TARGETS = {"gemm": (0.10, 0.25), "decode_attention": (0.10, 0.25)}
"""Held-out (median, p90) targets, for the GPUs in TARGET_GPUS; other rows are reported only."""
TARGET_GPUS = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "h200-sxm-measured")

FAMILY_NAMES = {
    "gemm": "GEMM (linear layers)",
    "decode_attention": "decode attention",
    "prefill_attention": "prefill attention",
    "allreduce": "all-reduce (NCCL)",
}

_SHORTFALLS = """\
## Where the roofline falls short, and why

- **GEMM.** The fitted form is the roofline with the additions the data demanded: compute
  and memory time combine as a p-norm (a kernel near the ridge point is slower than either
  bound); a thread block's serial walk over K sets a floor for skinny GEMMs until the library
  splits K; each output tile pays a fixed pipeline fill and epilogue worth `gemm_ramp_k` steps
  of K (about 100 on the A100, 120-130 on the H100/H200); and the tiles (128 x 256) run in
  waves over the SMs, so a GEMM just past a full wave waits for a nearly empty second one
  unless K is long enough to split. That tail costs only a fitted share of a wave
  (`gemm_wave_exponent`: 0.39 on the A100, 0.13-0.17 on the H100/H200), because cuBLAS picks
  other tiles or splits for many shapes; what remains is those per-shape choices. The L40S
  tables look measured without flushing its 96 MB L2: GEMVs whose weights fit in L2 reach
  well over the GDDR6 bandwidth, which a profile capped at 100% of the spec bandwidth cannot
  follow (serving weights never fit in L2, so the cap is right for the simulator); the fit
  switches the tile terms off there.
- **Decode attention.** Launch, then a cost per (sequence, KV head) unit and the KV bytes at
  a fitted bandwidth, the two overlapping (`decode_overlap_fraction` of the smaller shows);
  then what the kernel's layout adds. The A100 and L40S tables come from a FlashAttention-2
  build that splits a sequence over thread blocks only in its grouped-query path: an MHA
  decode runs one block per unit, and with fewer units than saturate HBM (0.62 per SM on the
  A100: 67 units) the bandwidth falls in proportion. The grouped-query path moves each query
  group into the sequence dimension, which with several sequences and KV heads costs two
  copies (5.8 µs on the A100), and a split sequence longer than one KV tile runs a combine
  kernel (5.6 µs). The H100/H200 tables (FlashAttention-3) split every layout, pay no copies
  and a 1.1-1.6 µs combine; the fit finds which kernel it faces by trying both
  (`decode_mha_split_kv`). What remains on the A100: MHA layouts (11% median / 25% p90 of
  their held-out rows) and split decodes of one or two units over 16k+ tokens, whose split
  count the model does not follow. On the L40S, whenever a benchmark's whole KV cache fits in
  the 96 MB L2 it is read at L2 speed, up to twice as fast as the model says; larger caches
  fit as well as on the other GPUs.
- **Prefill attention.** One efficiency for all head dimensions; FlashAttention's speed per
  FLOP differs by head dimension (64 runs slower than the fit, 192 and 256 faster), which
  dominates the p90. The prefill path pays a fixed `prefill_setup_s` beyond the launch it
  shares with decode: 1.8-1.9 µs on the H100/H200 (FlashAttention-3), none on the A100/L40S.
- **All-reduce.** α grows with the ring; bus bandwidth scales as (2/GPUs)^γ, which covers
  NVSwitch (γ < 0) and the L40S's PCIe-through-host path (γ ≈ 2), but NCCL's protocol
  switches between message sizes make mid-size messages slower than the line.
- **Not measured at all:** the per-step engine overheads (`step_overhead_s`,
  `per_seq_overhead_s`: scheduling, sampling, CUDA-graph gaps) are priors in every profile.
"""

def render_fidelity(profiles: Sequence[GpuProfile], image_dir: str | None,
                    own_measurements: str, moe_before_after: str = "") -> str:
    """The whole markdown document; `own_measurements` is a section rendered by
    `calibration.own_report`, `moe_before_after` one by `calibration.moe_report` (it closes
    "What the operator fit covers"); the last one, end to end, is rendered from the shipped
    replay table by `calibration.end_to_end_report`."""
    calibrated = [p for p in profiles if p.calibration is not None]
    spec_only = [p for p in profiles if p.calibration is None]
    parts = [_header(), _error_table(calibrated)]
    parts.extend(_gpu_section(p, image_dir) for p in calibrated)
    if spec_only:
        parts.append(_spec_only_section(spec_only))
    end_to_end = render_end_to_end(read_replay_table())
    # The own-measurements section, once the last, ends in an extra newline: trimmed, so that
    # one blank line separates it from the next as between the others.
    parts.append(_SHORTFALLS)
    if moe_before_after:
        parts.append(moe_before_after)
    parts += [own_measurements.rstrip("\n") + "\n", end_to_end]
    return "\n".join(parts).rstrip() + "\n"


def target_met(gpu: str, family: str, median: float, p90: float) -> str:
    """'yes' / 'no' against the target, or '—' where no target applies."""
    if gpu not in TARGET_GPUS or family not in TARGETS:
        return "—"
    median_max, p90_max = TARGETS[family]
    return "yes" if median <= median_max and p90 <= p90_max else "no"


def _header() -> str:
    return """\
# Cost-model fidelity

*Generated by `batchsim calibrate report` from the shipped profiles' recorded errors and the
small tables shipped beside them; do not edit by hand (tests check this file against them).*

Each calibrated profile in `src/batchsim/hardware_profiles/gpus/` was fitted by `batchsim
calibrate fit` to measured per-operator latencies and scored on a random fifth of the rows that
the fit did not see. The error is the absolute percentage error |predicted / measured − 1| of
the simulator's own operator functions (`src/batchsim/gpu/roofline.py`, the ones the cost model
runs). Target: median ≤ 10% and p90 ≤ 25% for GEMM and decode attention on the A100, H100 and
H200; the other families and the L40S are reported as they are. The last section, "End to
end", gives the error of whole served benchmarks replayed with the engine profiles.
"""


def _error_table(profiles: Sequence[GpuProfile]) -> str:
    lines = [
        "| GPU | operator family | held-out rows | median error | p90 error | target met |",
        "|---|---|---:|---:|---:|---|",
    ]
    for gpu in profiles:
        assert gpu.calibration is not None
        for family in FAMILIES:
            error = gpu.calibration.heldout_error.get(family)
            if error is None:
                continue
            met = target_met(gpu.name, family, error.median_ape, error.p90_ape)
            met = "**no**" if met == "no" else met
            lines.append(
                f"| {gpu.name} | {FAMILY_NAMES[family]} | {error.rows:,} | "
                f"{error.median_ape:.1%} | {error.p90_ape:.1%} | {met} |"
            )
    return "\n".join(lines) + "\n"


def _gpu_section(gpu: GpuProfile, image_dir: str | None) -> str:
    assert gpu.calibration is not None
    lines = [f"## {gpu.name}", "", f"{gpu.description}. Fitted on:", ""]
    for source in gpu.calibration.sources:
        lines.append(f"- `{source.file}`: {source.rows:,} rows ({source.filter})")
    if image_dir is not None:
        lines += ["", f"![predicted vs measured, {gpu.name}]({image_dir}/fidelity-{gpu.name}.png)"]
    return "\n".join(lines) + "\n"


def _spec_only_section(profiles: Sequence[GpuProfile]) -> str:
    lines = [
        "## Uncalibrated (spec-only) profiles",
        "",
        "No measurements exist for these yet: peaks come from vendor spec sheets and the "
        "efficiencies are borrowed priors, so their step times carry no measured error bound.",
        "",
    ]
    lines += [f"- `{p.name}`: {p.description}" for p in profiles]
    return "\n".join(lines) + "\n"


# Appended, not merged above (the sections above are shared with the end-to-end report): the
# operator families beyond bf16.
FAMILY_NAMES["gemm_fp8"] = "GEMM, fp8 weights"
FAMILY_NAMES["moe"] = "MoE experts, bf16"
FAMILY_NAMES["moe_fp8"] = "MoE experts, fp8 (block-scaled)"
FAMILY_NAMES["gemm_fp4"] = "GEMM, nvfp4 weights"
FAMILY_NAMES["moe_fp4"] = "MoE experts, nvfp4"
FAMILY_NAMES["moe_mxfp4"] = "MoE experts, mxfp4 (weight-only)"
_SHORTFALLS += """
## What the operator fit covers, and what it does not

- **Fitted, bf16:** GEMMs, decode and prefill attention over bf16 KV caches, NCCL all-reduce
  in fp16, on the A100, H100, H200, B200 and L40S. The B200's tables were cut from the
  aiconfigurator-core 0.12.0 wheel by `scripts/extract_aic_operator_tables.py`; each source in
  its profile names the file inside the wheel and the rows kept (`origin`). Its prefill
  attention is the least certain family of a datacentre GPU: against one fitted efficiency,
  FlashInfer's TRT-LLM prefill kernel runs head dimension 64 slower and 256 faster (signed
  held-out median -27% at 64, +25% at 256, +8% at 128).
- **Fitted, per-tensor fp8 GEMMs** (`GEMM, fp8 weights` above: vLLM's CUTLASS scaled-mm on the
  H100, H200 and B200): they get GEMM keys of their own (`efficiency.gemm_by_weights.fp8`,
  which the cost model uses for fp8 weights), because they differ from bf16's in every key:
  about 0.55-0.63 of the fp8 peak for large GEMMs (bf16: 0.73-0.83 of its peak), a heavier
  wave tail, and a kernel that quantises the activations first, costing 6.6-7.7 ns per token
  however narrow the row (`gemm_quant_token_s`), so that a 64-wide fp8 GEMM of 32,768 tokens
  takes 240 µs where bf16 takes 4 µs. Priced with the bf16 keys at the fp8 peak, as before,
  the same held-out rows came out 46-54% too fast (median). What remains is the kernel vLLM
  picks by token count: a count just past 16, 64, 128 or 256, or one not a multiple of 16, runs
  up to 2-3 times slower than its neighbours, and one fit between the two prices large aligned
  GEMMs (N and K of 4096 or more, 1,024 tokens or more) 4-14% too slow (median) and
  misaligned ones 2-8% too fast.
- **Not fitted, block-scaled fp8** (`fp8_block`, DeepSeek-style 128 x 128 scales; priced with
  the per-tensor fp8 keys). Below about 0.1-0.2 ms the public tables time a fixed floor, not the
  GPU: 58-90 µs (FlashInfer, DeepGEMM) and 166-178 µs (CUTLASS, for shapes not a multiple of
  128) for a 64 x 64 GEMM as for a 1024 x 4096 x 4096 one. No GPU work that small takes that
  long: it looks like the time of launching the kernels from Python, which a serving engine
  does not pay when it replays CUDA graphs, so the floor is not fitted. Where the GPU time
  shows (rows over 1 ms), block-scaled runs at 0.87 (H100), 0.98 (H200) and 0.99 (B200) of
  per-tensor's time (median), and the per-tensor keys price those rows +20%, +3% and +5%
  (median; p90 of the absolute error 18-33%).
- **Fitted, fused-MoE experts** (`MoE experts` above: vLLM 0.24.0's fused-MoE kernels on the
  H100, H200 and B200, `moe/` in the wheel): they get GEMM keys of their own per weight dtype
  (`efficiency.moe_by_weights`), which the cost model uses for the routed experts
  (`gpu/moe_experts.py`), and one more, `moe_pair_passes`: the passes over a bf16 hidden row
  that each routed (token, expert) pair costs beside the grouped GEMMs (gathering it, quantising
  it for fp8, the weighted sum back), which makes a call of many tokens on few experts slower
  than its GEMMs alone. The GEMMs are shaped as before (the touched experts' matrices side by
  side, one launch and K loop); what is new is their keys and the pair passes. Fitted on
  balanced routing and, per (TP, EP) layout, the kernel vLLM ran most there (Triton for bf16
  on Hopper, Triton under TP and FlashInfer's CUTLASS under EP for block-scaled fp8; TRT-LLM's
  kernels on the B200). The fp8 keys are fitted on block-scaled fp8 (DeepSeek-style
  checkpoints, the fp8 MoE models people serve), and price per-tensor fp8 experts too: the
  per-tensor table (FlashInfer's CUTLASS kernel with ModelOpt scales) is slower than bf16 on
  Hopper wherever weights dominate (on the H200, one token through 128 experts of 4096 x
  1536, top-8: 0.33 ms, against 0.096 ms for bf16's Triton kernel), an outlier left
  unfitted. The benchmark routes round-robin, touching min(E, T·k) experts; the simulator
  routes at random, touching fewer at small T: each is priced on its own load by the same
  kernel function. Not fitted: power-law routing (skew is the deployment's `moe_imbalance`),
  the all-to-all (spec bandwidth: docs/how-to/moe.md), nor anything that crosses NVLink
  domains (the NIC's spec rate and NCCL's per-step network latency:
  docs/how-to/multi-node.md). The table below compares the dense
  keys' price with the fitted one on the shipped held-out samples.
- **Not fitted, MLA:** absorbed decode and non-absorbed prefill are priced by the GQA
  attention keys with MLA's shapes (`gpu/moe_cost.py`, `attention_shape`); the wheel's MLA
  tables (`mla/`: FlashMLA, FlashAttention MLA, FlashInfer MLA, bf16 and fp8 KV) time whole
  DeepSeek-V3 attention modules: the projection GEMMs, the norms, rotary embedding and
  KV-cache write, and the attention kernel in one row. The cost model prices the GEMMs and the
  kernel but no element-wise work ("Our own measurements" below: the same gap in whole
  prefill steps), so attention keys fitted to those rows would carry that work as attention.
  The family waits for the element-wise work to be priced (or for tables of the attention
  kernel alone).
- **Fitted, NVFP4 GEMMs** (`GEMM, nvfp4 weights` above: vLLM's
  `FlashInferCuteDslNvFp4LinearKernel` on the B200, and on the B300, GB200 and GB300 alike, W4A4
  on the FP4 tensor cores): like fp8's, they get GEMM keys of their own
  (`efficiency.gemm_by_weights.nvfp4`), which the cost model uses for `nvfp4` and `mxfp4`
  weights on a profile with an FP4 peak and those keys: on the B200, 0.56 of the 9 PFLOPS FP4
  peak for large GEMMs, which take 0.57 of the fp8 table's time (median of the held-out GEMMs
  with 1,024 tokens or more and N, K of 4096 or more), and an activation quantisation of 0.67 ns
  per token. The fitted weight-streaming efficiency sits at its cap (1.0 of the spec bandwidth).
  Priced with the fp8 keys at the FP4 peak, as before, the same held-out rows came out 11% too
  slow (median) with a p90 error of 116%.
- **Fitted, FP4 fused-MoE experts** (`MoE experts, nvfp4` and `MoE experts, mxfp4
  (weight-only)` above; `moe/` in the wheel, balanced routing): NVFP4 experts (rows of
  `moe_dtype == nvfp4`, W4A4 on the FP4 tensor cores; per layout the kernel vLLM ran most,
  FlashInfer's TRT-LLM one) on the B200, B300, GB200 and GB300, into
  `efficiency.moe_by_weights.nvfp4`; and MXFP4 experts on all six GPUs, into
  `moe_by_weights.mxfp4`, from the rows of `moe_dtype == w4a16_mxfp4` timed with vLLM's gpt-oss
  MXFP4 method (kernel names containing `gptossmxfp4`: OpenAI's Triton kernel on the H100 and
  H200, FlashInfer's TRT-LLM mxfp4_bf16 kernel on Blackwell). Those are the kernels vLLM
  serves gpt-oss with, whose checkpoints ship MXFP4 experts: the weights are dequantised in the
  kernel and the activations stay bf16. Left out: the same table's Marlin rows (a
  compressed-tensors MXFP4 checkpoint, on another model's shapes) and the Blackwell W4A8 rows
  (`w4a8_mxfp4_mxfp8`, activations quantised to MXFP8, which vLLM runs only when asked); mxfp4
  experts are priced with the weight-only keys either way. The cost model uses a dtype's own
  MoE keys where the profile has them. Before, FP4 experts borrowed fp8's MoE keys at the FP4
  peak on Blackwell and, for mxfp4 on the H100 and H200, bf16's at the bf16 rate: on every
  held-out row of the fits, nvfp4 experts came out 31-36% off (median; p90 115-120%; 30-36%
  too slow) and mxfp4 ones 26-28% (p90 55-62%; 13-16% too fast) on Blackwell and 25-32% (p90
  48-76%; 10-25% too slow) on Hopper. With their own keys: nvfp4 8-10% median / 31-35% p90,
  mxfp4 7% / 15-18% on Blackwell and 13% / 35-36% on Hopper. The mxfp4 keys are fitted on
  gpt-oss's two shapes alone (hidden size and expert width 2880, top-4 of 32 or 128 experts):
  with one hidden size, a fixed cost per GEMM is hard to tell from the serial K loop (on Hopper
  the fit puts the ~60 µs of a one-token call into `gemm_k_step_s`, 17 ns per unit of K, and
  none into the launch), so MXFP4 MoE models of other shapes are extrapolated. On Blackwell
  the W4A16 kernel multiplies in bf16: its peak efficiency, 0.06-0.09 of the FP4 peak the cost
  model prices FP4 weights at, is 0.38-0.40 of the bf16 peak. The second table below compares
  the borrowed keys with the fitted ones on the shipped held-out samples.
- **Not fitted, FP4** elsewhere: `mxfp4` GEMMs (the wheel holds no mxfp4 GEMM rows: priced with
  the nvfp4 keys, at its own bytes); a profile with an FP4 peak but no FP4 keys of its own
  borrows the fp8 keys (MoE experts: fp8's MoE keys), else bf16's. Without an FP4 peak (Hopper,
  Ampere, Ada) FP4 weights run weight-only, dequantised and multiplied at the bf16 rate with the
  bf16 keys, as int4 does, except mxfp4 experts on a profile with mxfp4 MoE keys.
- **Not fitted:** fp8 KV caches (the decode keys are bf16's, at half the bytes), int8 and int4
  GEMMs (bf16 keys at their rate), sliding-window attention.
"""
