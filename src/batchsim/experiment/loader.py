"""Reading an experiment file: YAML in, validated ``Experiment`` out, or a one-line-per-problem
``ConfigError`` naming the file, the dotted key path and what was expected.

Also applies ``--set dotted.key=value`` overrides to the raw YAML data before validation, and
dumps a resolved experiment (defaults filled in) back to YAML.
"""

import copy
import difflib
import functools
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from batchsim.experiment.schema import RULE_ERROR_TYPE, Experiment


class ConfigError(ValueError):
    """A user-facing problem with an experiment file or an override: the message is meant to be
    printed as is (one line per problem), never with a traceback."""


# --- YAML ------------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML loader that rejects duplicate keys instead of silently keeping the last."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)

# The same strict rules on libyaml's parser where PyYAML has it: a plan reads its file and its
# overrides for every run, and the pure-Python parser made that a few percent of the plan. A
# document it refuses is read again by `_StrictLoader`, whose error (and message) is the one
# reported.
_FAST_STRICT_LOADER: type[Any] = _StrictLoader
if hasattr(yaml, "CSafeLoader"):
    class _StrictCLoader(yaml.CSafeLoader):
        """`_StrictLoader`'s duplicate-key rule on libyaml's parser."""

    _StrictCLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                   _construct_mapping)
    _FAST_STRICT_LOADER = _StrictCLoader


def _strict_load(text: str) -> Any:
    """`yaml.load(text, Loader=_StrictLoader)`, parsed by libyaml when it can be; a copy of
    what an earlier call on the same text gave (a plan reads the same file and overrides for
    each of its hundreds of runs), so no caller can change the remembered document."""
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_FAST_STRICT_LOADER)
    except yaml.YAMLError:
        return yaml.load(text, Loader=_StrictLoader)


@functools.lru_cache(maxsize=64)
def _count_aliases(text: str) -> int:
    try:
        return sum(isinstance(event, yaml.AliasEvent)
                   for event in yaml.parse(text, Loader=_FAST_STRICT_LOADER))
    except yaml.YAMLError:
        return sum(isinstance(event, yaml.AliasEvent)
                   for event in yaml.parse(text, Loader=_StrictLoader))


def _yaml_problem(err: yaml.YAMLError) -> str:
    """``line:column: problem`` from a YAML error (1-based, as editors count)."""
    mark = getattr(err, "problem_mark", None)
    # One line: the reader's own location ("in <unicode string>, position 0") adds nothing.
    problem = str(getattr(err, "problem", None) or err).splitlines()[0]
    if mark is None:
        return problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


# Aliases let a short file stand for an exponentially large document (each alias repeats what
# it names); an experiment needs few, if any.
MAX_YAML_ALIASES = 100


def _read_yaml(path: Path) -> dict[str, Any]:
    if path.exists() and not path.is_dir() and not path.is_file():
        # A FIFO or a device would block the read (or never end): refuse it unread.
        raise ConfigError(f"{path}: not a regular file (a pipe, socket or device), expected "
                          "an experiment YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected an experiment YAML file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read file ({err})") from None
    try:
        aliases = _count_aliases(text)
        if aliases > MAX_YAML_ALIASES:
            raise ConfigError(f"{path}: {aliases} YAML aliases (*name); at most "
                              f"{MAX_YAML_ALIASES} are allowed, so that no file expands into "
                              "an exponentially large document")
        data = _strict_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML at {_yaml_problem(err)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read (lists or mappings inside each "
                          "other hundreds of levels down)") from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{path}: the top level must be a mapping of keys (got {got})")
    return data


# --- public API ------------------------------------------------------------------------------


def load_experiment(path: Path, overrides: Sequence[str] = ()) -> tuple[Experiment, Path]:
    """Read, override and validate an experiment file.

    Returns the experiment and the file's folder, against which relative paths in it (traces,
    empirical length files, model or profile files) are resolved.
    """
    path = Path(path)
    data = apply_overrides(_read_yaml(path), overrides)
    return validate_experiment(data, source=str(path)), path.resolve().parent


def validate_experiment(data: dict[str, Any], source: str) -> Experiment:
    """Validate raw experiment data; ``source`` (usually the file name) prefixes each problem."""
    try:
        return Experiment.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def dump_resolved(exp: Experiment) -> str:
    """YAML of the experiment with every default filled in; loading it gives ``exp`` back."""
    return yaml.safe_dump(
        exp.model_dump(mode="json"), sort_keys=False, default_flow_style=False, allow_unicode=True
    )


# --- --set overrides -------------------------------------------------------------------------


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``dotted.key=value`` override applied in order.

    The value is parsed as YAML (``12`` int, ``0.5`` float, ``[1, 2]`` list, ``{kind: fixed,
    value: 8}`` mapping). A list item is addressed by index (``policies.0``) or, in a list of
    named mappings such as ``policies``, by name (``policies.vllm``). Missing mappings on the
    way are created; unknown keys are left for validation to reject.
    """
    result = copy.deepcopy(data)
    for override in overrides:
        _apply_override(result, override)
    return result


def _apply_override(data: dict[str, Any], override: str) -> None:
    def fail(reason: str) -> ConfigError:
        return ConfigError(f"--set {override}: {reason}")

    key, sep, raw_value = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise fail("expected dotted.key=value")
    segments = key.split(".")
    if any(not segment.strip() for segment in segments):
        raise fail(f"empty part in key {key!r}")
    try:
        value = _strict_load(raw_value)
    except yaml.YAMLError as err:
        raise fail(f"value is not valid YAML ({_yaml_problem(err)})") from None

    node: Any = data
    for depth, segment in enumerate(segments):
        walked = ".".join(segments[:depth]) or "the top level"
        last = depth == len(segments) - 1
        if isinstance(node, dict):
            if last:
                node[segment] = value
            else:
                if node.get(segment) is None:  # absent or empty (`slo:`): start a mapping
                    node[segment] = {}
                node = node[segment]
        elif isinstance(node, list):
            index = _list_index(node, segment, walked, fail)
            if last:
                node[index] = value
            else:
                node = node[index]
        else:
            raise fail(f"{walked} is {_show(node)}, not a mapping or a list")


def _list_index(
    items: list[Any], segment: str, walked: str, fail: Callable[[str], ConfigError]
) -> int:
    """Resolve ``segment`` to an index of ``items``: a number, or the ``name`` of an item."""
    if segment.isdigit():
        index = int(segment)
        if index >= len(items):
            raise fail(f"index {index} out of range ({walked} has {len(items)} items)")
        return index
    names = [item.get("name") if isinstance(item, dict) else None for item in items]
    if segment in names:
        return names.index(segment)
    if any(isinstance(name, str) for name in names):
        known = ", ".join(str(name) for name in names if name is not None)
        raise fail(f"no item named {segment!r} in {walked} (names: {known})")
    raise fail(f"{walked} is a list, expected an index, got {segment!r}")


# --- pydantic errors -> user messages --------------------------------------------------------


def format_validation_error(err: ValidationError, source: str) -> str:
    """One ``<source>: <dotted.key>: <what was expected> (got <value>)`` line per problem."""
    lines: list[str] = []
    for detail in err.errors():
        line = f"{source}: {_format_detail(detail)}"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines)


def _format_detail(detail: ErrorDetails) -> str:
    path, owner, node = _user_path(detail["loc"])
    kind = detail["type"]
    ctx = detail.get("ctx", {})
    if kind == RULE_ERROR_TYPE:
        path += [part for part in str(ctx["key"]).split(".") if part]
        return f"{_dotted(path)}: {ctx['message']}"
    if kind == "missing":
        return f"{_dotted(path)}: required key is missing"
    if kind == "extra_forbidden":
        return f"{_dotted(path)}: {_unknown_key(path[-1] if path else '', owner)}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tags = ", ".join(_tagged_variants(_unwrap(node)) or {})
        got = f" (got {_show(ctx['tag'])})" if "tag" in ctx else ""
        return f"{_dotted([*path, 'kind'])}: expected one of: {tags}{got}"
    return f"{_dotted(path)}: {_expected(detail)} (got {_show(detail['input'])})"


def _dotted(path: Sequence[object]) -> str:
    return ".".join(str(part) for part in path) or "(top level)"


def _unknown_key(key: object, owner: type[BaseModel] | None) -> str:
    if owner is None:
        return "unknown key"
    known = list(owner.model_fields)
    message = f"unknown key (expected one of: {', '.join(known)})"
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.8)
    return f"{message}; did you mean {close[0]!r}?" if close else message


_EXPECTED = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "finite_number": "expected a finite number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "string_pattern_mismatch": "expected a name without / or \\",
    "invalid_key": "expected a string key",
}


def _expected(detail: ErrorDetails) -> str:
    """What the value should have been, in the words of the YAML file."""
    kind = detail["type"]
    ctx = detail.get("ctx", {})
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    bounds = {
        "greater_than": ">",
        "greater_than_equal": ">=",
        "less_than": "<",
        "less_than_equal": "<=",
    }
    if kind in bounds:
        bound = next(iter(ctx.values()))
        return f"expected a value {bounds[kind]} {bound:g}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace(" or ", ", ").replace("'", "")
        return f"expected one of: {expected}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":  # e.g. a [start, end] pair given three numbers
        return f"expected at most {ctx.get('max_length')} item(s)"
    if kind == "string_too_short":
        return "expected a non-empty string"
    if kind == "value_error":
        return str(detail["msg"]).removeprefix("Value error, ")
    return str(detail["msg"]).replace("Input should be", "expected")


def _show(value: object, limit: int = 60) -> str:
    """A short YAML-like rendering of a value for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        except yaml.YAMLError:
            text = repr(value)
        text = text.removesuffix("\n...").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- mapping pydantic's error locations back to the user's keys ------------------------------


def _user_path(
    loc: tuple[int | str, ...],
) -> tuple[list[int | str], type[BaseModel] | None, Any]:
    """``loc`` without the discriminator tags pydantic inserts for tagged unions
    (``workload.arrivals.poisson.rate`` -> ``workload.arrivals.rate``), the model that owns
    the last key (to list the keys it accepts) and the type expected at ``loc``."""
    path: list[int | str] = []
    node: Any = Experiment
    owner: type[BaseModel] | None = None
    for part in loc:
        node = _unwrap(node)
        variants = _tagged_variants(node)
        if variants is not None and part in variants:
            node = variants[part]
            continue
        owner = node if _is_model(node) else None
        path.append(part)
        node = _child(node, part)
    return path, owner, node


def _is_model(node: Any) -> bool:
    return isinstance(node, type) and issubclass(node, BaseModel)


def _is_union(node: Any) -> bool:
    return get_origin(node) in (Union, types.UnionType)


def _unwrap(node: Any) -> Any:
    """Strip ``Annotated`` and ``X | None`` down to the type a value is validated against."""
    while True:
        if get_origin(node) is Annotated:
            node = get_args(node)[0]
        elif _is_union(node) and type(None) in get_args(node) and len(get_args(node)) == 2:
            node = next(arg for arg in get_args(node) if arg is not type(None))
        else:
            return node


def _tagged_variants(node: Any) -> dict[str, type[BaseModel]] | None:
    """``{kind tag: model}`` if ``node`` is a union of models discriminated on ``kind``."""
    if not _is_union(node):
        return None
    variants: dict[str, type[BaseModel]] = {}
    for arg in get_args(node):
        field = arg.model_fields.get("kind") if _is_model(arg) else None
        if field is None or get_origin(field.annotation) is not Literal:
            return None
        for tag in get_args(field.annotation):
            variants[tag] = arg
    return variants


def _child(node: Any, part: int | str) -> Any:
    if _is_model(node):
        field = node.model_fields.get(part) if isinstance(part, str) else None
        return field.annotation if field is not None else None
    if get_origin(node) is list and isinstance(part, int):
        return get_args(node)[0]
    return None
