"""nestor's orchestrator: the CLI, workflow specs, scheduling and tracking."""

__version__ = "0.1.0"
