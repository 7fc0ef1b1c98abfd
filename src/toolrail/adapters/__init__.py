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

Reference: integrations.md, "Provider adapters"; docs/providers.md.
"""
