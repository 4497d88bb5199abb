"""Read models of a run, each derived from the journal and the run directory:
MLflow (projector, tracking), results, status, summary tables, plots, artifacts
and artifacts. Above the engine: they never drive a run.
"""
