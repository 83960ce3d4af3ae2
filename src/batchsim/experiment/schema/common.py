"""What every experiment-file model shares: the base model, the constrained number types
and ``rule_error`` for rules that span several keys."""

from types import UnionType
from typing import Annotated, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
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
NonNegativeInt = Annotated[int, _NUMBER, Field(ge=0)]
Positive = Annotated[float, _NUMBER, Field(gt=0)]
NonNegative = Annotated[float, _NUMBER, Field(ge=0)]


def rule_error(key: str, message: str) -> PydanticCustomError:
    """An error for a rule spanning several keys; ``key`` is dotted, relative to the model."""
    text = f"{key}: {message}" if key else message
    return PydanticCustomError(RULE_ERROR_TYPE, text, {"key": key, "message": message})


class ConfigModel(BaseModel):
    """Base of every experiment-file model: unknown keys are errors, values are immutable,
    and a number is never a true/false value."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, data: object) -> object:
        # The constrained types above say so themselves; this catches every plain `int` or
        # `float` field too (a count or a fraction written `true` would otherwise be 1).
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and field is not None and _numeric(field.annotation):
                    raise rule_error(name, "expected a number, not a true/false value "
                                           f"(got {str(value).lower()})")
        return data


def _numeric(annotation: object) -> bool:
    """Whether a field takes numbers and not true/false (int or float, maybe optional)."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) is Annotated:
        return _numeric(get_args(annotation)[0])
    arguments = get_args(annotation)
    if get_origin(annotation) in (Union, UnionType) and bool not in arguments:
        return any(_numeric(argument) for argument in arguments)
    return False
