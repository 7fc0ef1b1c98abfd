"""One call's stages (pipeline.md, "Stages"): prepare (``pipeline``), the body and its
signal (``body``, ``watch``, and ``bodytask``: the one module that touches asyncio's
internals), commit (``commit``), and what the tool body and the middleware see of the
call (``execution``, ``progress``)."""
