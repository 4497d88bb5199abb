"""The `nestor` commands: parsing flags and printing. The top layer: it may import
every other part of the orchestrator; nothing imports it (but slurm's command group,
which prints with its console).
"""
