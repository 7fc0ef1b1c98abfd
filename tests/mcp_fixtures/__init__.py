"""Helpers of the MCP tests: a toolrail server script and ways to run it."""
