"""Docstring reading, seen through ``tr.tool``: the description and parameter descriptions.

typed-tools.md, "Schema": the description is the docstring's text before its first
section, cleaned with ``inspect.cleandoc``, every line right-stripped (a whitespace-only
line is blank), surrounding blank lines stripped and paragraphs separated by one blank
line; parameter descriptions come from a Google-, NumPy- or Sphinx-style section.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

import toolrail as tr


def described(function: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The tool's description and its parameters' descriptions (only those that have one)."""
    tool = tr.tool(function)
    properties = tr.thaw(tr.snapshot_json(tool.parameters))["properties"]
    return tool.description, {
        name: schema["description"]
        for name, schema in properties.items()
        if "description" in schema
    }


# ---- Google style -------------------------------------------------------------------


def test_google_name_colon_description_lines_describe_parameters() -> None:
    def copy(source: str, target: str, force: bool = False) -> None:
        """Copy a file.

        Args:
            source: The file to copy.
            target: Where to put it.
            force: Overwrite an existing target.
        """

    assert described(copy) == (
        "Copy a file.",
        {
            "source": "The file to copy.",
            "target": "Where to put it.",
            "force": "Overwrite an existing target.",
        },
    )


def test_google_name_with_type_in_parentheses_describes_parameters() -> None:
    def copy(source: str, mapping: dict[str, int]) -> None:
        """Copy a file.

        Args:
            source (str): The file to copy.
            mapping (dict[str, int]): Renames, old: new.
        """

    assert described(copy) == (
        "Copy a file.",
        {"source": "The file to copy.", "mapping": "Renames, old: new."},
    )


def test_google_continuation_lines_join_the_parameters_description() -> None:
    def fetch(url: str, retries: int = 3) -> None:
        """Fetch a URL.

        Args:
            url: The address to fetch,
                including the scheme.
            retries (int): How often to try again
                after a failure
                before giving up.
        """

    assert described(fetch)[1] == {
        "url": "The address to fetch, including the scheme.",
        "retries": "How often to try again after a failure before giving up.",
    }


def test_google_description_may_start_on_the_next_line() -> None:
    def fetch(url: str) -> None:
        """Fetch a URL.

        Args:
            url:
                The address to fetch.
        """

    assert described(fetch)[1] == {"url": "The address to fetch."}


def test_a_parameter_without_a_documented_description_has_no_description_key() -> None:
    def fetch(url: str, timeout: float = 1.0) -> None:
        """Fetch a URL.

        Args:
            url: The address to fetch.
            missing: Not a parameter at all.
        """

    params = described(fetch)[1]
    assert params == {"url": "The address to fetch."}
    schema = tr.thaw(tr.snapshot_json(tr.tool(fetch).parameters))
    assert set(schema["properties"]) == {"url", "timeout"}


# ---- NumPy style --------------------------------------------------------------------


def test_numpy_parameters_section_describes_parameters() -> None:
    def scale(values: list[float], factor: float = 2.0) -> None:
        """Scale values.

        Parameters
        ----------
        values : list of float
            The values to scale.
        factor : float, optional
            The multiplier.
        """

    assert described(scale) == (
        "Scale values.",
        {"values": "The values to scale.", "factor": "The multiplier."},
    )


def test_numpy_multi_line_descriptions_are_joined() -> None:
    def scale(values: list[float]) -> None:
        """Scale values.

        Parameters
        ----------
        values : list of float
            The values to scale,
            in any order.

        Returns
        -------
        list of float
            The scaled values.
        """

    assert described(scale) == ("Scale values.", {"values": "The values to scale, in any order."})


# ---- Sphinx style -------------------------------------------------------------------


def test_sphinx_param_fields_describe_parameters() -> None:
    def send(to: str, body: str, urgent: bool = False) -> None:
        """Send a message.

        :param to: The recipient.
        :param str body: The text to send.
        :param bool urgent: Whether to page the recipient.
        :type to: str
        :returns: Nothing.
        """

    assert described(send) == (
        "Send a message.",
        {
            "to": "The recipient.",
            "body": "The text to send.",
            "urgent": "Whether to page the recipient.",
        },
    )


def test_sphinx_continuation_lines_join_the_description() -> None:
    def send(to: str) -> None:
        """Send a message.

        :param to: The recipient,
            as an address.
        :raises ValueError: never.
        """

    assert described(send) == ("Send a message.", {"to": "The recipient, as an address."})


# ---- the description ----------------------------------------------------------------


def test_returns_raises_and_examples_sections_are_not_part_of_the_description() -> None:
    def divide(a: int, b: int) -> float:
        """Divide a by b.

        Returns:
            The quotient.

        Raises:
            ZeroDivisionError: When b is 0.

        Examples:
            >>> divide(1, 2)
            0.5
        """
        return a / b

    assert described(divide) == ("Divide a by b.", {})


def test_the_description_stops_at_the_first_section_even_after_several_paragraphs() -> None:
    def divide(a: int, b: int) -> float:
        """Divide a by b.

        Both are integers.

        Raises:
            ZeroDivisionError: When b is 0.

        Args:
            a: The dividend.
            b: The divisor.
        """
        return a / b

    assert described(divide) == (
        "Divide a by b.\n\nBoth are integers.",
        {"a": "The dividend.", "b": "The divisor."},
    )


def test_the_description_stops_at_a_numpy_section() -> None:
    def scale(values: list[float]) -> None:
        """Scale values.

        Notes
        -----
        Nothing is copied.
        """

    assert described(scale)[0] == "Scale values."


def test_paragraphs_stay_separated_by_exactly_one_blank_line() -> None:
    def act() -> None:
        """First paragraph,
        two lines.


        Second paragraph.



        Third paragraph.
        """

    assert described(act)[0] == (
        "First paragraph,\ntwo lines.\n\nSecond paragraph.\n\nThird paragraph."
    )


def test_whitespace_only_lines_are_blank() -> None:
    def act() -> None:
        pass

    act.__doc__ = "   \n  \t \n    First.\n    \n   \n        \n    Second.\n  \t  \n   "

    assert described(act)[0] == "First.\n\nSecond."


def test_every_line_is_right_stripped() -> None:
    def act() -> None:
        pass

    act.__doc__ = "Title.   \n\n    Body line one.\t \n    Body line two.  \n    "

    assert described(act)[0] == "Title.\n\nBody line one.\nBody line two."


def test_common_indentation_is_removed_and_relative_indentation_kept() -> None:
    def act() -> None:
        """Run a command.

        For instance:

            act --fast
        """

    assert described(act)[0] == "Run a command.\n\nFor instance:\n\n    act --fast"


def test_surrounding_blank_lines_are_stripped() -> None:
    def act() -> None:
        """

        Do the thing.


        """

    assert described(act)[0] == "Do the thing."


def test_a_docstring_of_only_sections_has_an_empty_description() -> None:
    def act(x: int) -> None:
        """
        Args:
            x: The input.
        """

    assert described(act) == ("", {"x": "The input."})


def test_a_whitespace_only_docstring_has_an_empty_description() -> None:
    def act() -> None:
        """ """

    assert described(act)[0] == ""


def test_no_docstring_gives_an_empty_description_and_no_parameter_descriptions() -> None:
    def act(x: int) -> None:
        pass

    assert described(act) == ("", {})


def test_an_annotated_field_description_describes_a_parameter_too() -> None:
    def scale(
        factor: Annotated[float, Field(description="The multiplier.")],
        n: int = 1,
    ) -> None:
        """Scale.

        Args:
            n: Count.
        """

    assert described(scale) == ("Scale.", {"factor": "The multiplier.", "n": "Count."})
