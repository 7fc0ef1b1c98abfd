"""toolrail under the agent frameworks people already use.

One module per framework, each an optional extra that imports its framework when the
module itself is imported (``import toolrail`` never does):

- ``toolrail.integrations.pydantic_ai``: :class:`ToolrailToolset`, a pydantic-ai
  ``AbstractToolset`` (extra ``pydantic-ai``);
- ``toolrail.integrations.openai_agents``: ``function_tools(...)``, the OpenAI Agents
  SDK's ``FunctionTool`` list (extra ``openai-agents``);
- ``toolrail.integrations.langchain``: ``tools(...)``, LangChain ``BaseTool``\\ s, and
  ``tool_node(...)``, a LangGraph ``ToolNode`` (extra ``langchain``).

Each keeps the framework's agent loop and hands every call to ``execute``: scopes,
guards, approvals, frozen arguments, middleware and MCP tools all apply. Reference:
docs/frameworks.md.
"""
