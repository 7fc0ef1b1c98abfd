"""The values every layer shares: tools and calls, lossless JSON, results, decisions,
cancellation signals, the error hierarchy, the extension-point types.

Nothing here knows a registry: these modules import only each other (and ``_dispatch``'s
``Execution`` and ``RunContext``, for annotations), so every other layer can use them.
"""
