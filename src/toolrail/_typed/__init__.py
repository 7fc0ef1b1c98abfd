"""Typed tools (typed-tools.md): ``tr.tool`` turns a plain function into a ``Tool``, with
its schema from the type hints and docstring and its arguments and output validated by
pydantic, which only this package imports."""
