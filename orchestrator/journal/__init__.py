"""The run's journal (`journal`: the append-only, fsynced truth) and the events it
holds (`events`). The bottom of the orchestrator's layers: imports none of them.
"""
