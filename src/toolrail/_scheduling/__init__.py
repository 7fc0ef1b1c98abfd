"""Running one model step's calls: ``run`` and ``stream`` (scheduler.md), and the same
driver kept open for a code-mode program's nested calls."""
