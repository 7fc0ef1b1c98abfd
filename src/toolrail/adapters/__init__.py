"""Provider adapters: toolrail values to and from each provider's wire format.

One module per provider, each pure mapping code over the provider SDK's objects or
plain dicts, never importing the SDK at run time:

- ``toolrail.adapters.openai``: Chat Completions (``chat_tools``, ``calls_from_chat``,
  ``chat_messages``) and Responses (``responses_tools``, ``calls_from_response``,
  ``responses_items``);
- ``toolrail.adapters.anthropic``: Messages (``tools``, ``calls_from_message``,
  ``tool_result_blocks``);
- ``toolrail.adapters.gemini``: ``google-genai`` (``function_declarations``,
  ``calls_from_response``, ``function_responses``).

In each, tools go out, calls come in, results go out, in that order.

Reference: integrations.md, "Provider adapters"; docs/providers.md.
"""
