"""Provider adapters: toolrail values to and from each provider's wire format.

One module per provider, each pure mapping code over the provider SDK's objects or
plain dicts, never importing the SDK at run time:

- ``toolrail.adapters.openai``: Chat Completions (``chat_tools``, ``calls_from_chat``,
  ``chat_messages``, ``chat_followup``) and Responses (``responses_tools``,
  ``calls_from_response``, ``responses_items``, ``responses_followup``);
- ``toolrail.adapters.anthropic``: Messages (``tools``, ``calls_from_message``,
  ``tool_result_blocks``, ``followup_blocks``);
- ``toolrail.adapters.gemini``: ``google-genai`` (``function_declarations``,
  ``calls_from_response``, ``function_responses``, ``followup_parts``).

In each, tools go out, calls come in (with ``scope=`` and ``parent=`` for a
sub-agent's calls), results go out, in that order; the follow-up function returns
what the results cannot carry (their ``contexts``, images a tool message cannot hold),
a list to send right after the results-out list.

Tool names: each adapter sends a registry name its provider rejects (a dot, more than
64 characters; for Gemini also a first character other than a letter or ``_``) as one
it accepts, and its calls-in functions, given the same ``schemas``, map the model's
calls back to the registry's names. A name the provider accepts goes out unchanged. A
rejected name has each rejected character replaced by ``_`` (``github.search`` →
``github_search``, for Gemini ``3d`` → ``_3d``); where that is too long or is, or would
be, another tool's wire name, it becomes its first 55 characters, ``_`` and 8 hex digits
of the SHA-256 of the registry name. The mapping is a function of the set of names sent
(never their order) and no two names share a wire name; a wire name it does not
produce comes back unchanged (and the registry reports an unknown tool).

Four helpers the adapters share are public, for integrations that build on a provider
format of their own (the agent frameworks do):

- ``portable_names(names)``: each name mapped to one every provider accepts
  (``^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$``), by the rule above;

- ``visible_content(result)``: the blocks a provider shows the model of a result
  (``Error: <message>`` for an error result that shows nothing);
- ``strict_schema(name, parameters)``: a tool's parameters in OpenAI's strict dialect;
- ``without_strict_nulls(arguments, parameters)``: a strict call's arguments without
  the ``null`` that strict mode made the model send for a property it may leave out.

Reference: integrations.md, "Provider adapters"; docs/providers.md.
"""

from ._common import visible_content
from ._names import portable_names
from ._strict import strict_schema, without_strict_nulls

__all__ = ["portable_names", "strict_schema", "visible_content", "without_strict_nulls"]
