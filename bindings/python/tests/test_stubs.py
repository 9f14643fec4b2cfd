"""The stubs against the extension's own signatures.

stubtest (scripts/test.d/55-python.sh) can only check that every name exists: a pybind11
function has no introspectable signature. pybind11 does write each signature as the first line
of its docstring, so this compares, for every function and method of ``airlock/_airlock.pyi``,
the parameter names, their order, which are keyword-only and which have a default."""

import ast
import pathlib

import pytest

from airlock import _airlock

STUBS = pathlib.Path(__file__).resolve().parent.parent / "airlock" / "_airlock.pyi"


def split_top_level(text):
    parts, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def runtime_shape(name, function):
    """[(name, kind, has_default)] from pybind11's signature line, or None without one."""
    first = (getattr(function, "__doc__", None) or "").split("\n", 1)[0]
    if not first.startswith(name + "("):
        return None
    inside = first[len(name) + 1:first.rindex(") ->")]
    shape, kind = [], "positional"
    for part in split_top_level(inside):
        if part == "*":
            kind = "keyword"
        elif part.startswith("**"):
            shape.append((part[2:].split(":")[0], "**", False))
        elif part.startswith("*"):
            shape.append((part[1:].split(":")[0], "*", False))
            kind = "keyword"
        else:
            shape.append((part.split(":")[0].split("=")[0].strip(), kind, "=" in part))
    return shape


def stub_shape(definition):
    arguments = definition.args
    positional = arguments.posonlyargs + arguments.args
    defaults = [False] * (len(positional) - len(arguments.defaults)) + [True] * len(
        arguments.defaults)
    shape = [(a.arg, "positional", d) for a, d in zip(positional, defaults)]
    if arguments.vararg:
        shape.append((arguments.vararg.arg, "*", False))
    shape += [(a.arg, "keyword", d is not None)
              for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)]
    if arguments.kwarg:
        shape.append((arguments.kwarg.arg, "**", False))
    return shape


def is_static(definition):
    return any(isinstance(d, ast.Name) and d.id == "staticmethod"
               for d in definition.decorator_list)


def stubbed_callables():
    tree = ast.parse(STUBS.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, getattr(_airlock, node.name), node
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and not any(
                        isinstance(d, ast.Name) and d.id == "property"
                        for d in member.decorator_list):
                    owner = getattr(_airlock, node.name)
                    yield f"{node.name}.{member.name}", getattr(owner, member.name), member


CHECKED = [(name, runtime, stub) for name, runtime, stub in stubbed_callables()
           if runtime_shape(name.rsplit(".", 1)[-1], runtime) is not None]


def test_most_of_the_extension_is_checked():
    # A pybind11 upgrade that stopped writing signature lines would otherwise pass vacuously.
    assert len(CHECKED) > 100, [name for name, _, _ in CHECKED]


@pytest.mark.parametrize("name,runtime,stub", CHECKED, ids=[c[0] for c in CHECKED])
def test_a_stub_has_the_runtime_parameters(name, runtime, stub):
    expected = runtime_shape(name.rsplit(".", 1)[-1], runtime)
    got = stub_shape(stub)
    if "." in name and not is_static(stub):
        # pybind11 names the receiver `self`, as the stubs do.
        assert got[:1] == expected[:1], f"{name}: {got[:1]} != {expected[:1]}"
    if expected and expected[-1][1] == "**":
        # A runtime **kwargs the stub spells out as the keywords it takes (SandboxSpec's fields).
        spelled = [(n, k, d) for n, k, d in got if k == "keyword" and d]
        got = [entry for entry in got if entry not in spelled]
        if spelled and got[-1][1] != "**":
            got.append(("kwargs", "**", False))
    # Positional names may differ (pybind11 calls an unnamed one arg0, the stubs say what it
    # is), and so may those of *args and **kwargs; the number, kinds and defaults may not, nor
    # the names of keyword parameters.
    def comparable(shape):
        return [(n if k == "keyword" else "", k, d) for n, k, d in shape]

    assert comparable(got) == comparable(expected), f"{name}: stub {got} != runtime {expected}"
