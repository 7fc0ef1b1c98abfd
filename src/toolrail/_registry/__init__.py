"""The façade objects: ``ToolRegistry`` and its ``Scope`` views, which register tools,
middleware and guards, and run calls through ``_dispatch`` and ``_scheduling``."""
