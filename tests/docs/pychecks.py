"""Checks of Python, TOML and JSON blocks that need no running service.

* A Python example runs, with the page's earlier Python blocks, in one namespace.
* A Python fragment (``<!-- check: fragment -->``: it uses names the page leaves to the
  reader, such as ``settings`` or ``client``) is not run, but checked against the code:
  its imports import, every call of a name it can resolve binds to that callable's real
  signature (argument count and keyword names), and every class it spells out (a
  ``Protocol``) has the same methods with the same parameters as the real one.
* TOML is a configuration: it parses and validates against ``bot.config.Settings``.
* JSON with ``<!-- schema: module:Model -->`` validates against that pydantic model, and
  names exactly its fields: validating and dumping it again gives the same keys at every
  level. A bare ``...`` in a list or an object stands for "more of the same" and is
  dropped first; ``"…"`` inside a string is an elided value and stays a string.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import tomllib
from typing import Any

from pydantic import BaseModel

from bot.config import Settings
from tests.docs.blocks import Block, blocks

# Names a fragment may call without importing them: the public packages.
_PUBLIC = ("bot", "bot.runner", "bot.clients", "sandbox", "sandbox.inside.sandbox_tools", "skills")

_namespaces: dict[str, dict[str, object]] = {}
_ran: dict[str, set[int]] = {}


def run_python(block: Block) -> None:
    """Run ``block`` after the page's earlier runnable Python blocks (each runs once)."""
    namespace = _namespaces.setdefault(block.page, {"__name__": f"docs_{block.page}"})
    done = _ran.setdefault(block.page, set())
    for earlier in blocks(block.page):
        if earlier.line > block.line:
            break
        if earlier.lang != "python" or earlier.marker is not None or earlier.line in done:
            continue
        done.add(earlier.line)
        exec(compile(earlier.text, earlier.id, "exec"), namespace)


def check_fragment(block: Block) -> int:
    """Check a Python fragment against the code; the number of calls and classes checked
    (a fragment that checks nothing is refused: mark it a figure instead)."""
    tree = ast.parse(block.text)
    names = _page_imports(block)
    checked = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = _resolve(node.func, names)
            if target is not None and callable(target):
                _bind(target, node, block)
                checked += 1
        elif isinstance(node, ast.ClassDef):
            real = names.get(node.name)
            assert inspect.isclass(real), f"{block.id}: no class {node.name} in the code"
            _same_methods(node, real, block)
            checked += 1
    assert checked, f"{block.id}: the fragment names nothing this check can find in the code"
    return checked


def _page_imports(block: Block) -> dict[str, Any]:
    names: dict[str, Any] = {}
    for module in _PUBLIC:
        loaded = importlib.import_module(module)
        for name in dir(loaded):
            value = getattr(loaded, name)
            if not name.startswith("_") and not inspect.ismodule(value):
                names[name] = value
    for earlier in blocks(block.page):
        if earlier.lang != "python" or earlier.line > block.line:
            continue
        for node in ast.walk(ast.parse(earlier.text)):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), (
                        f"{earlier.id}: {node.module} has no {alias.name}"
                    )
                    names[alias.asname or alias.name] = getattr(module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names[alias.asname or alias.name] = importlib.import_module(alias.name)
    return names


def _resolve(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names)
        if owner is not None and (inspect.isclass(owner) or inspect.ismodule(owner)):
            found = getattr(owner, node.attr, None)
            assert found is not None, f"{ast.unparse(node)} does not exist"
            return found
    return None


def _bind(target: Any, call: ast.Call, block: Block) -> None:
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(
        keyword.arg is None for keyword in call.keywords
    ):
        return
    signature = inspect.signature(target)
    arguments = [object()] * len(call.args)
    keywords = {keyword.arg: object() for keyword in call.keywords if keyword.arg}
    # "..." as the last argument stands for arguments the page leaves out.
    if call.args and isinstance(call.args[-1], ast.Constant) and call.args[-1].value is ...:
        signature.bind_partial(*arguments[:-1], **keywords)
        return
    try:
        signature.bind(*arguments, **keywords)
    except TypeError as error:
        raise AssertionError(
            f"{block.id}: `{ast.unparse(call)}` does not fit {target.__qualname__}{signature}: "
            f"{error}"
        ) from None


def _same_methods(node: ast.ClassDef, real: type, block: Block) -> None:
    for item in node.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        method = getattr(real, item.name, None)
        assert method is not None, f"{block.id}: {real.__name__} has no method {item.name}"
        documented = [arg.arg for arg in item.args.args]
        actual = list(inspect.signature(method).parameters)
        assert documented == actual, (
            f"{block.id}: {real.__name__}.{item.name} takes {actual}, the page says {documented}"
        )
        real_async = inspect.iscoroutinefunction(method)
        doc_async = isinstance(item, ast.AsyncFunctionDef)
        assert real_async == doc_async, (
            f"{block.id}: {real.__name__}.{item.name} is {'' if real_async else 'not '}async"
        )


def check_toml(block: Block) -> Settings:
    return Settings(**tomllib.loads(block.text))


def json_sample(text: str) -> Any:
    """The JSON of a sample, its bare ``...`` elisions dropped."""
    cleaned = re.sub(r",\s*\.\.\.(?=\s*[\]}])", "", text)
    cleaned = re.sub(r"(?<=[\[{])\s*\.\.\.\s*,?", "", cleaned)
    return json.loads(cleaned)


def model(path: str) -> type[BaseModel]:
    module, _, name = path.partition(":")
    found = getattr(importlib.import_module(module), name)
    assert inspect.isclass(found) and issubclass(found, BaseModel), f"{path} is not a model"
    return found


def check_schema(block: Block) -> None:
    sample = json_sample(block.text)
    # Unset optional fields are left out, as the API leaves them out.
    validated = (
        model(block.argument).model_validate(sample).model_dump(mode="json", exclude_unset=True)
    )
    assert_same_keys(sample, validated, block.id)


def assert_same_keys(sample: Any, actual: Any, where: str) -> None:
    """``sample`` names the same fields as ``actual`` at every level (lists: the sample's
    items against the first actual item's keys)."""
    if isinstance(sample, dict) and isinstance(actual, dict):
        assert set(sample) == set(actual), (
            f"{where}: the sample has {sorted(set(sample) - set(actual))} that the real "
            f"document lacks, and lacks {sorted(set(actual) - set(sample))}"
        )
        for key in sample:
            assert_same_keys(sample[key], actual[key], f"{where}.{key}")
    elif isinstance(sample, list) and isinstance(actual, list) and sample and actual:
        for item in sample:
            assert_same_keys(item, actual[0], f"{where}[]")
