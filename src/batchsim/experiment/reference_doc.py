"""Generate the experiment-file reference tables from the pydantic models in ``schema/``.

The tables in ``docs/reference/experiment.md`` sit between ``<!-- schema:start -->`` and
``<!-- schema:end -->``; a test checks they equal ``render_schema_markdown()``, so the doc
cannot go stale. Regenerate them with
``python -m batchsim.experiment.reference_doc docs/reference/experiment.md``.
"""

import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from batchsim.experiment.schema import Experiment

START_MARKER = "<!-- schema:start -->"
END_MARKER = "<!-- schema:end -->"


def render_schema_markdown() -> str:
    """Markdown: one section with a key table per model, top level first, depth first."""
    return "\n\n".join(_render_model(model) for model in _documented_models(Experiment)) + "\n"


def replace_generated_section(document: str, generated: str) -> str:
    """``document`` with the text between the schema markers replaced by ``generated``."""
    head, start, rest = document.partition(START_MARKER)
    _, end, tail = rest.partition(END_MARKER)
    if not start or not end:
        raise ValueError(f"document lacks the {START_MARKER} ... {END_MARKER} markers")
    return f"{head}{START_MARKER}\n\n{generated}\n{END_MARKER}{tail}"


def generated_section(document: str) -> str:
    """The text between the schema markers, without the blank lines around it."""
    _, _, rest = document.partition(START_MARKER)
    return rest.partition(END_MARKER)[0].strip("\n") + "\n"


# --- walking the models ----------------------------------------------------------------------


def _documented_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model reachable from ``root``, in the order a reader meets them."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        model = _doc_target(model)
        if model in seen:
            return
        seen.append(model)
        for field in model.model_fields.values():
            for child in _models_in(field.annotation):
                visit(child)

    visit(root)
    return seen


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if _is_model(annotation):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _doc_target(model: type[BaseModel]) -> type[BaseModel]:
    """A variant that extends a documented model of the same ``kind`` (a mixture component
    extends its length distribution with a weight) is documented by that model."""
    base = model.__bases__[0]
    if _is_model(base) and _kind_tag(base) is not None and _kind_tag(base) == _kind_tag(model):
        return _doc_target(base)
    return model


def _kind_tag(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    tags = get_args(field.annotation)
    return str(tags[0]) if len(tags) == 1 else None  # several: a choice, not a variant's tag


def _is_model(node: Any) -> bool:
    return isinstance(node, type) and issubclass(node, BaseModel)


# --- rendering -------------------------------------------------------------------------------


def _render_model(model: type[BaseModel]) -> str:
    anchor = model.__name__.lower()
    title = model.__name__
    tag = _kind_tag(model)
    if tag is not None:
        title += f" (`kind: {tag}`)"
    lines = [f'<a id="{anchor}"></a>', "", f"### {title}", "", _one_line(model.__doc__ or "")]
    lines += ["", "| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if name == "kind" and tag is not None:
            type_text, default = f"`{tag}`", "required"
        else:
            type_text, default = _type_text(field), _default_text(field)
        meaning = _one_line(field.description or "")
        lines.append(f"| `{name}` | {_cell(type_text)} | {_cell(default)} | {_cell(meaning)} |")
    return "\n".join(lines)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _type_text(field: FieldInfo) -> str:
    return _constrained(_annotation_text(field.annotation), field.metadata)


def _constrained(text: str, metadata: list[Any]) -> str:
    """``text`` with the constraints in ``metadata``: ``non-empty string``, ``number > 0``."""
    bounds = _bounds_text(metadata)
    if _has_min_length(metadata):
        text = f"non-empty {text}"
    if not bounds:
        return text
    if text.endswith(" or null"):
        return f"{text.removesuffix(' or null')} {bounds} or null"
    return f"{text} {bounds}"


def _has_min_length(metadata: list[Any]) -> bool:
    return any(
        isinstance(item, annotated_types.MinLen)
        or (isinstance(item, FieldInfo) and _has_min_length(item.metadata))
        for item in metadata
    )


def _annotation_text(node: Any) -> str:
    origin = get_origin(node)
    if origin is Annotated:
        inner, *metadata = get_args(node)
        return _constrained(_annotation_text(inner), metadata)
    if origin in (Union, types.UnionType):
        args = get_args(node)
        members = [arg for arg in args if arg is not type(None)]
        tagged = [_doc_target(arg) for arg in members if _is_model(arg) and _kind_tag(arg)]
        if len(tagged) == len(members) > 1:
            links = ", ".join(f"[`{_kind_tag(m)}`](#{m.__name__.lower()})" for m in tagged)
            text = f"mapping by `kind`: {links}"
        else:
            text = " or ".join(_annotation_text(arg) for arg in members)
        return f"{text} or null" if len(members) < len(args) else text
    if origin is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in get_args(node))
    if origin is list:
        item = _annotation_text(get_args(node)[0])
        return (
            f"list of mappings{item.removeprefix('mapping')}"
            if item.startswith("mapping")
            else f"list of {item}"
        )
    if _is_model(node):
        return f"mapping, see [{node.__name__}](#{node.__name__.lower()})"
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    return names.get(node, getattr(node, "__name__", str(node)))


def _bounds_text(metadata: list[Any]) -> str:
    parts: list[str] = []
    for item in metadata:
        if isinstance(item, FieldInfo):
            parts.append(_bounds_text(item.metadata))
        elif isinstance(item, annotated_types.Gt):
            parts.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Ge):
            parts.append(f">= {item.ge}")
        elif isinstance(item, annotated_types.Lt):
            parts.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.Le):
            parts.append(f"<= {item.le}")
    return ", ".join(part for part in parts if part)


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6).strip()
    return f"`{text.removesuffix('...').strip()}`"


# --- command line ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Print the tables, or rewrite them in place in the Markdown files given."""
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    generated = render_schema_markdown()
    if not paths:
        sys.stdout.write(generated)
    for path in paths:
        path.write_text(replace_generated_section(path.read_text("utf-8"), generated), "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
