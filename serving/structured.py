"""Structured output: schema checks before a call, conformance checks after it."""
from __future__ import annotations

import json
from typing import Any

from chorus.serving.types import RequestError, RequestSampling


class SchemaError(RequestError):
    """A JSON schema is invalid or can never be satisfied."""


def check_schema(schema: Any) -> None:
    """Reject invalid schemas and the unsatisfiable cases we can see statically."""
    import jsonschema

    if not isinstance(schema, dict):
        raise SchemaError(f"json_schema must be a JSON object (dict), got {type(schema).__name__}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as err:
        raise SchemaError(f"invalid JSON schema at {'/'.join(map(str, err.path)) or '<root>'}: {err.message}") from None
    why = _unsatisfiable(schema, "<root>")
    if why:
        raise SchemaError(f"unsatisfiable JSON schema: {why}")


def _unsatisfiable(s: Any, where: str) -> str | None:
    if s is False:
        return f"{where} is the schema `false`"
    if not isinstance(s, dict):
        return None
    if "enum" in s and not s["enum"]:
        return f"{where} has an empty enum"
    if s.get("not") in ({}, True):
        return f"{where} is `not: {{}}`, which nothing satisfies"
    for lo, hi in (("minimum", "maximum"), ("minLength", "maxLength"), ("minItems", "maxItems"),
                   ("minProperties", "maxProperties")):
        if lo in s and hi in s and s[lo] > s[hi]:
            return f"{where} has {lo}={s[lo]} > {hi}={s[hi]}"
    if "exclusiveMinimum" in s and "exclusiveMaximum" in s and s["exclusiveMinimum"] >= s["exclusiveMaximum"]:
        return f"{where} has an empty exclusive range"
    props = s.get("properties", {})
    for req in s.get("required", []):
        if props.get(req) is False or (s.get("additionalProperties") is False and req not in props):
            return f"{where} requires '{req}', which is not allowed"
    for k, sub in props.items():
        if k in s.get("required", []):
            why = _unsatisfiable(sub, f"{where}.{k}")
            if why:
                return why
    if "items" in s and s.get("minItems", 0) > 0:
        why = _unsatisfiable(s["items"], f"{where}[]")
        if why:
            return why
    return None


def check_output(text: str, sampling: RequestSampling) -> tuple[bool, Any, str | None]:
    """(conformed, parsed, error) for a constrained request's text."""
    if sampling.choices is not None:
        t = text.strip()
        if t in sampling.choices:
            return True, t, None
        return False, None, f"output {text[:80]!r} is not one of the choices"
    import jsonschema

    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return False, None, f"not valid JSON: {err.msg} at char {err.pos}"
    try:
        jsonschema.validate(value, sampling.json_schema)
    except jsonschema.ValidationError as err:
        return False, None, f"JSON does not match the schema: {err.message}"
    return True, value, None
