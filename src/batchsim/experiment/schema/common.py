"""What every experiment-file model shares: the base model, the constrained number types
and ``rule_error`` for rules that span several keys."""

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

RULE_ERROR_TYPE = "config_rule"
"""The pydantic error type of a cross-field rule; its context names the key (``key``)."""



def _not_a_boolean(value: object) -> object:
    # YAML's `true` is a bool, and pydantic would take it as the number 1 without a word.
    if isinstance(value, bool):
        raise ValueError("expected a number, not a true/false value")
    return value


_NUMBER = BeforeValidator(_not_a_boolean)
AtLeastOne = Annotated[int, _NUMBER, Field(ge=1)]
Positive = Annotated[float, _NUMBER, Field(gt=0)]
NonNegative = Annotated[float, _NUMBER, Field(ge=0)]


def rule_error(key: str, message: str) -> PydanticCustomError:
    """An error for a rule spanning several keys; ``key`` is dotted, relative to the model."""
    text = f"{key}: {message}" if key else message
    return PydanticCustomError(RULE_ERROR_TYPE, text, {"key": key, "message": message})


class ConfigModel(BaseModel):
    """Base of every experiment-file model: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )
