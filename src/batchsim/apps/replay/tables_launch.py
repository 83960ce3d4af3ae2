"""How the public tables' publisher launched the engine of an aggregate row.

The rows of the tidy CSV (the shape of `serving_benchmarks_dev.csv`) do not record the engine's
launch arguments. Their publisher, aiconfigurator, writes launch files for the deployments it
measures with rules of its own, and those differ from the engines' defaults in what decides how
prompts are batched: the max batch, the step token budget and, for SGLang, mixed chunks. This
module encodes those rules (docs/background/engines.md, "The tables' launch", cites each),
and the replay applies them to the rows of a table in place of the engine profile's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

# The publisher's allowance for a prompt beside a step's decodes, in tokens.
PROMPT_ALLOWANCE = 1500
# The first SGLang release whose launch template the publisher's generator shipped with mixed
# chunks and a prefill budget (added with its Dynamo 0.8.0 templates).
_SGLANG_FIRST_LAUNCHED = (0, 5, 6)


@dataclass(frozen=True, slots=True)
class TablesLaunch:
    """The launch arguments a row implies; None leaves the engine profile's value."""

    max_batch: int | None = None
    token_budget: int | None = None
    mixed_prefill: bool | None = None


def tables_launch(backend: str, version: str, batch_size: int, prompt_tokens: int,
                  attention_data_parallel: int) -> TablesLaunch:
    """The launch of an aggregate row of `backend` `version` with `batch_size` users."""
    if attention_data_parallel != 1:
        # A rank's max batch is not known when the row's users are spread over the ranks.
        return TablesLaunch()
    if backend == "trtllm":
        # max_num_tokens = batch size + prompt + allowance, chunked context off.
        return TablesLaunch(batch_size, batch_size + prompt_tokens + PROMPT_ALLOWANCE)
    if backend == "vllm" and _release(version):
        # --max-num-batched-tokens = batch size + prompt + allowance, in the template of every
        # release the generator ships (a row that names none keeps the profile's defaults).
        return TablesLaunch(batch_size, batch_size + prompt_tokens + PROMPT_ALLOWANCE)
    if backend == "sglang" and _release(version) >= _SGLANG_FIRST_LAUNCHED:
        # --max-prefill-tokens prompt + allowance and --enable-mixed-chunk: a step's decodes
        # count against the prefill budget, which the chunk size still caps.
        return TablesLaunch(batch_size, prompt_tokens + PROMPT_ALLOWANCE, mixed_prefill=True)
    return TablesLaunch(batch_size)


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version ("0.5.6.post2" is (0, 5, 6)); () when none."""
    numbers: list[int] = []
    for part in version.strip().split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)
