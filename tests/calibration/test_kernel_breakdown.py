"""`calibrate breakdown` sorts real kernel names into the right categories, writes per-step tables
whose categories add up to the step, and runs where pydantic and simpy are not installed (the
lent GPU machine has only torch, numpy, pandas, pyyaml, typer and rich)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from batchsim.apps.calibrate_cli import calibrate_app
from batchsim.calibration.measure import kernel_breakdown
from batchsim.calibration.measure.forward import StepShape, quick_model
from batchsim.calibration.measure.kernel_breakdown import (
    BREAKDOWN_FILE,
    CATEGORIES,
    INFO_FILE,
    NAME_CHARS,
    TOP_FILE,
    classify,
)
from batchsim.calibration.measure.step_memory import step_bytes, weight_bytes

REPO = Path(__file__).resolve().parents[2]

# Names as torch.profiler reports them on Hopper (cuBLAS 12, FlashAttention-2 in PyTorch, cuDNN
# SDPA, Inductor's Triton kernels, ATen's element-wise templates), a few of vLLM's, and the
# CPU operators the tests profile.
REALISTIC_NAMES = {
    "gemm": [
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT",
        "nvjet_tst_64x16_64x16_2x1_v_bz_splitK_TNT",
        "nvjet_hsh_256x128_64x4_2x1_v_bz_TNN",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas",
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_"
        "align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, "
        "4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<"
        "__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float> >("
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
        "cublasGemvTensorStridedBatched<__nv_bfloat16>, float>, float, float)",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
        "__nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, "
        "__nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, "
        "__nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)",
        "triton_tem_fused_mm_0",
        "aten::mm",
        "aten::addmm",
    ],
    "attention": [
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
        "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> "
        ">, false, true, false, false, true, true, false, false>(pytorch_flash::"
        "Flash_fwd_params)",
        "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, "
        "false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, "
        "cutlass::bfloat16_t> >, false, false, false, false, true, false, false, false>("
        "pytorch_flash::Flash_fwd_params)",
        "void pytorch_flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, "
        "128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, "
        "cutlass::bfloat16_t> >, 4, 3, true>(pytorch_flash::Flash_fwd_params)",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_"
        "kernel0_0",
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
        "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
        "BatchPrefillWithRaggedKVCacheKernel",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    ],
    "fused": [
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
        "triton_poi_fused_cat_mul_sub_1",
        "triton_poi_fused_mul_silu_2",
        "triton_per_fused_add_mean_mul_pow_rsqrt_3",
        # A fused RMSNorm in front of attention, named after the attention op it feeds.
        "triton_red_fused__scaled_dot_product_flash_attention__to_copy_mean_mul_permute_pow_"
        "rsqrt",
        "## Call CompiledFxGraph fgpapqj5mg5k6fcrluphxlifukqfuesr7uhke5qkze3bblqctptf ##",
    ],
    "elementwise": [
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<"
        "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<"
        "float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, "
        "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
        "std::array<char*, 3ul>)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<"
        "c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<"
        "c10::BFloat16>, std::array<char*, 3ul>)",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
        "at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}"
        "::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}>("
        "at::TensorIteratorBase&, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()"
        "() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, "
        "at::native::gpu_kernel_impl_nocast<...>)",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >("
        "at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
        "unsigned int, float, 4>)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()"
        "() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::"
        "rsqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
        "{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)",
        "void at::native::elementwise_kernel_with_index<int, at::native::arange_cuda_out("
        "c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::"
        "{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(long)#1}>(int, at::native::arange_cuda_out(...)::{lambda(long)#1}, "
        "function_traits<...>::result_type*)",
        "void vllm::rms_norm_kernel<c10::BFloat16, 8, 1>(c10::BFloat16*, long, "
        "c10::BFloat16 const*, c10::BFloat16 const*, float, int, int)",
        "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<"
        "c10::BFloat16>(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, "
        "int)",
        "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, "
        "c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)",
        "aten::mul",
        "aten::add",
        "aten::rsqrt",
        "aten::div_",
    ],
    "copy": [
        "Memcpy DtoD (Device -> Device)",
        "Memset (Device)",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() "
        "const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, "
        "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
        "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<"
        "at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1>("
        "at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)"
        "::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, "
        "unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned "
        "int, 4u>, int, unsigned int)",
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
        "at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, "
        "c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(...)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<"
        "c10::BFloat16>, std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, "
        "std::array<char*, 1ul>)",
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, "
        "__nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, int, int, int, "
        "float const*, float const*)",
        "aten::copy_",
        "aten::_to_copy",
        "aten::cat",
    ],
    "other": [
        "aten::empty_strided",
        "aten::transpose",
        "aten::view",
        "Torch-Compiled Region: 0/0",
    ],
}


@pytest.mark.parametrize(
    ("category", "name"),
    [(category, name) for category, names in REALISTIC_NAMES.items() for name in names],
    ids=lambda value: value[:60],
)
def test_realistic_kernel_names_land_in_their_category(category: str, name: str) -> None:
    assert classify(name) == category


def test_every_category_is_one_the_tables_know() -> None:
    assert set(REALISTIC_NAMES) == set(CATEGORIES)


torch = pytest.importorskip("torch")

QUICK_ARGS = ["--device", "cpu", "--quick", "--prefill", "16,32", "--decode", "2x16",
              "--runs", "2", "--warmup", "1"]


@pytest.fixture(scope="module")
def breakdown(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("breakdown")
    result = CliRunner().invoke(calibrate_app, ["breakdown", *QUICK_ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _steps(table: pd.DataFrame) -> Any:
    """The table's rows grouped by step (pandas' GroupBy)."""
    return table.groupby(["phase", "batch_size", "context", "new_tokens", "compiled"])


def test_every_step_has_a_row_per_category_adding_up_to_the_step(breakdown: Path) -> None:
    table = pd.read_csv(breakdown / BREAKDOWN_FILE)
    steps = _steps(table)
    assert sorted(steps.groups) == [("decode", 2, 16, 1, False), ("prefill", 1, 0, 16, False),
                                    ("prefill", 1, 0, 32, False)]
    for _, rows in steps:
        assert list(rows["category"]) == list(CATEGORIES)
        assert rows["device_us_per_step"].sum() == pytest.approx(
            rows["step_device_us"].iloc[0], rel=1e-4)
        assert rows["share"].sum() == pytest.approx(1.0, rel=1e-4)
        assert rows["step_device_us"].iloc[0] > 0 and rows["step_wall_us"].iloc[0] > 0
        by_category = rows.set_index("category")
        # Every layer runs its GEMMs and attention: two layers, four GEMMs each, plus the head.
        assert by_category.loc["gemm", "kernels_per_step"] >= 9
        assert by_category.loc["attention", "device_us_per_step"] > 0


def test_the_top_kernels_of_each_step_are_ranked_and_named(breakdown: Path) -> None:
    top = pd.read_csv(breakdown / TOP_FILE)
    for _, rows in _steps(top):
        assert 1 <= len(rows) <= 15
        assert list(rows["rank"]) == list(range(1, len(rows) + 1))
        assert rows["device_us_per_step"].is_monotonic_decreasing
        assert rows["kernel"].str.len().max() <= NAME_CHARS
        assert set(rows["category"]) <= set(CATEGORIES)
        assert "gemm" in set(rows["category"])


def test_the_run_info_names_the_device_the_options_and_every_step(breakdown: Path) -> None:
    info = json.loads((breakdown / INFO_FILE).read_text())
    assert info["device"] == "cpu" and info["torch"] == str(torch.__version__)
    assert info["model"] == "quick-toy"
    assert info["options"] == {"prefill_lengths": [16, 32], "decode_points": [[2, 16]],
                               "compiled": False, "runs": 2, "warmup": 1}
    assert len(info["done"]) == 3 and info["skipped"] == [] and info["failed"] == []


def test_steps_that_do_not_fit_are_listed_and_the_rest_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = quick_model()
    small = step_bytes(model, 2, 1, 16)
    assert small < step_bytes(model, 1, 16, 0)
    # Free memory is read once for the weights, then once per step: only the decode step fits.
    free = itertools.chain([weight_bytes(model)], itertools.repeat(small))
    monkeypatch.setattr(kernel_breakdown, "_free_bytes", lambda *_: lambda: next(free))
    result = CliRunner().invoke(calibrate_app, ["breakdown", *QUICK_ARGS, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / INFO_FILE).read_text())
    assert info["done"] == ["eager, decode batch 2 x 1 tokens over 16"]
    assert [reason.split(":")[0] for reason in info["skipped"]] == [
        "eager, prefill batch 1 x 16 tokens over 0", "eager, prefill batch 1 x 32 tokens over 0"]
    assert all("needs" in reason and "free" in reason for reason in info["skipped"])
    assert set(pd.read_csv(tmp_path / BREAKDOWN_FILE)["phase"]) == {"decode"}


def test_a_failing_step_is_listed_the_others_are_kept_and_the_exit_code_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = kernel_breakdown.profile_kernels
    calls = itertools.count()

    def second_fails(*args: object, **kwargs: object) -> list[kernel_breakdown.KernelTime]:
        if next(calls) == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(kernel_breakdown, "profile_kernels", second_fails)
    result = CliRunner().invoke(calibrate_app, ["breakdown", *QUICK_ARGS, "--out", str(tmp_path)])
    assert result.exit_code == 1
    info = json.loads((tmp_path / INFO_FILE).read_text())
    assert info["failed"] == ["eager, prefill batch 1 x 32 tokens over 0: RuntimeError: "
                              "CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert len(info["done"]) == 2
    assert len(_steps(pd.read_csv(tmp_path / BREAKDOWN_FILE)).groups) == 2


class _Event:
    """What key_averages() yields, as torch builds with either name of the device time."""

    def __init__(self, key: str, device: str, us: float, *, annotation: bool = False,
                 old_torch: bool = False) -> None:
        self.key, self.count = key, 3
        self.device_type = getattr(torch.autograd.DeviceType, device)
        self.is_user_annotation = annotation
        if old_torch:  # before `self_device_time_total`
            self.self_cuda_time_total = us
        else:
            self.self_device_time_total = us


def test_on_cuda_only_device_kernels_count_once() -> None:
    events = [
        _Event("aten::mm", "CPU", 50.0),  # the CPU op that launched the GEMM
        _Event("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "CUDA", 30.0),
        _Event("triton_poi_fused_mul_silu_2", "CUDA", 6.0, old_torch=True),
        _Event("Memcpy DtoD (Device -> Device)", "CUDA", 2.0),
        # The range torch.compile opens, seen on the GPU: spans the kernels above.
        _Event("## Call CompiledFxGraph fabc ##", "CUDA", 40.0, annotation=True),
        _Event("Torch-Compiled Region: 0/0", "CUDA", 40.0),  # unflagged: still not a kernel
        _Event("cudaLaunchKernel", "CPU", 9.0),
    ]
    kernels = kernel_breakdown._device_kernels(torch, events)
    assert [(k.name, k.calls, k.total_us) for k in kernels] == [
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 3, 30.0),
        ("triton_poi_fused_mul_silu_2", 3, 6.0),
        ("Memcpy DtoD (Device -> Device)", 3, 2.0),
    ]


@pytest.mark.parametrize("bad", [["--decode", "32-2048"], ["--decode", "0x16"],
                                 ["--prefill", "16,abc"], ["--prefill", "0"]])
def test_malformed_step_lists_are_refused(bad: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(calibrate_app, ["breakdown", "--device", "cpu", "--quick",
                                                *bad, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert not (tmp_path / INFO_FILE).exists()


def test_the_options_make_the_steps_in_order() -> None:
    options = kernel_breakdown.BreakdownOptions(
        device="cpu", model=quick_model(), out=Path("unused"), prefill_lengths=(8,),
        decode_points=((2, 16),))
    assert options.shapes() == (StepShape("prefill", 1, 8, 0), StepShape("decode", 2, 1, 16))


# Run before the command: refuses pydantic and simpy to every importer but typer. (typer 0.29+
# parses options with pydantic, its own dependency: where typer needs it, pip installed it with
# typer; batchsim's code must not need either.)
_BLOCKER = """
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in ("pydantic", "simpy"):
            return None
        frame = sys._getframe(1)
        while frame is not None and "importlib" in frame.f_globals.get("__name__", ""):
            frame = frame.f_back
        importer = frame.f_globals.get("__name__", "") if frame is not None else ""
        if name.startswith("pydantic") and importer.partition(".")[0] in ("typer", "pydantic"):
            return None
        raise ImportError(f"{name} imported by {importer}: not installed on the GPU machine")

sys.meta_path.insert(0, Blocker())
from batchsim.apps.calibrate_cli import calibrate_app
assert not any(m.partition(".")[0] in ("pydantic", "simpy") for m in sys.modules), "imported"
calibrate_app()
"""


def test_the_device_command_line_runs_without_pydantic_or_simpy(tmp_path: Path) -> None:
    """As the lent GPU machine runs it: from the checkout (PYTHONPATH), with nothing of the
    project's dependencies but torch, numpy, pandas, pyyaml, typer and rich."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKER, "breakdown", "--out", str(tmp_path / "kb"),
         "--device", "cpu", "--quick", "--prefill", "16", "--decode", "", "--runs", "1",
         "--warmup", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "kb" / BREAKDOWN_FILE).is_file()


def test_the_blocker_catches_an_import_of_pydantic_outside_typer(tmp_path: Path) -> None:
    program = _BLOCKER.replace("calibrate_app()", "import pydantic")
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "pydantic imported by __main__" in done.stderr
