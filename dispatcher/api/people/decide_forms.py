"""Reading a decision form's edited arguments: one reading for the approval page
and the inbox, so both refuse the same input with the same words."""

from __future__ import annotations

import json
from typing import Any

from parkgate import jcs
from parkgate.schema import depth_error


def parse_edits(raw: str, max_depth: int) -> dict[str, Any] | str:
    """The edited arguments as an object, or what is wrong with them."""
    try:
        parsed = json.loads(raw)
    except RecursionError:
        return "The edited arguments are nested too deeply."
    except ValueError as exc:
        return f"The edited arguments are not valid JSON: {exc}"
    if not isinstance(parsed, dict):
        return "The edited arguments must be a JSON object."
    found = jcs.problem(parsed, "arguments", text=False)
    if found is not None:  # json.loads takes NaN and Infinity; JSON has neither
        return f"The edited arguments are not valid JSON: {found}"
    if depth_error(parsed, max_depth) is not None:
        return f"The edited arguments nest deeper than {max_depth} levels."
    return parsed
