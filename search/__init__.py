"""Search spaces and ask/tell search algorithms.

Pure decision logic: no Ray, Horovod, MLflow or torch import here, so the
orchestrator can drive it from anywhere and tests run in milliseconds.
"""
