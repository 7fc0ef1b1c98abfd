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

Three helpers the adapters share are public, for integrations that build on a provider
format of their own (the agent frameworks do):

- ``visible_content(result)``: the blocks a provider shows the model of a result
  (``Error: <message>`` for an error result that shows nothing);
- ``strict_schema(name, parameters)``: a tool's parameters in OpenAI's strict dialect;
- ``without_strict_nulls(arguments, parameters)``: a strict call's arguments without
  the ``null`` that strict mode made the model send for a property it may leave out.

Reference: integrations.md, "Provider adapters"; docs/providers.md.
"""

from ._common import visible_content
from ._strict import strict_schema, without_strict_nulls

__all__ = ["strict_schema", "visible_content", "without_strict_nulls"]
